#include "ops/cpu/matmul_dnnl.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include "engine/core/check.h"

namespace fanout::ops::cpu {

// Note [oneDNN GEMMs in device threads]
// Every CPU device runs its ops on its own stream thread (Note [CPU device
// compute]); the GEMMs must run on that thread alone, or N devices would
// oversubscribe the cores N-fold. Debian's oneDNN 2.6 is built on OpenMP, which
// sizes its parallel regions by the calling thread's nthreads ICV: each thread
// sets it to 1 before its first oneDNN call (oneDNN also sizes its blocking by the
// thread count it sees when a primitive is created), so a GEMM never opens an
// OpenMP team and two devices' GEMMs run side by side on two cores.
// Primitives are created once per GemmDesc and executed from any thread at once.
// oneDNN allows that with a user-managed scratchpad (its library-managed one is
// shared and binds a primitive to one thread), so each thread owns its
// scratchpad and its stream; memory objects wrap the caller's pointers per call.

namespace {

// Leaked on purpose: device threads may still run GEMMs while statics are torn
// down at exit.
dnnl::engine& cpu_engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

void dnnl_single_threaded() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_THREADPOOL
#error "a oneDNN threadpool build needs a threadpool passed to each stream"
#endif
  // TBB: oneDNN runs in the caller's arena, the device's own. SEQ: one thread.
}

dnnl::memory::data_type dnnl_type(DType d) {
  FANOUT_ASSERT(d == DType::f32 || d == DType::bf16, "matmul: no oneDNN GEMM for ", dtype_name(d));
  return d == DType::f32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, scratchpad;
  std::string impl;
};

std::unique_ptr<const Primitive> primitive_create(const GemmDesc& g) {
  using dims = dnnl::memory::dims;
  // Transposed operands are strides over the same buffer, not copies.
  const int64_t lda = g.a_stride();
  dnnl::memory::desc a({g.M, g.K}, dnnl_type(g.in), g.a_trans ? dims{1, lda} : dims{lda, 1});
  dnnl::memory::desc b({g.K, g.N}, dnnl_type(g.in), g.b_trans ? dims{1, g.K} : dims{g.N, 1});
  dnnl::memory::desc c({g.M, g.N}, dnnl_type(g.out), dims{g.c_stride(), 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);  // C = 1 * C + A B, the accumulation in C's f32
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    return std::make_unique<const Primitive>(
        Primitive{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc(), pd.impl_info_str()});
  } catch (const dnnl::error& e) {
    FANOUT_ASSERT(false, "matmul: oneDNN has no GEMM for M ", g.M, " N ", g.N, " K ", g.K, " ",
                  dtype_name(g.in), " -> ", dtype_name(g.out), " on ", dnnl_cpu_isa_name(), ": ",
                  e.what());
  }
}

const Primitive& primitive_for(const GemmDesc& g) {
  FANOUT_ASSERT(g.M > 0 && g.N > 0 && g.K > 0, "matmul: empty GEMM M ", g.M, " N ", g.N, " K ",
                g.K);
  FANOUT_ASSERT(!(g.accumulate && g.out == DType::bf16), "matmul: accumulating into bf16");
  dnnl_single_threaded();
  static std::mutex mutex;
  static auto* cache = new std::map<GemmDesc, std::unique_ptr<const Primitive>>;
  std::lock_guard lock(mutex);
  auto& slot = (*cache)[g];
  if (!slot) slot = primitive_create(g);
  return *slot;
}

// This thread's stream and scratchpad (64-byte aligned, grown on demand).
struct ThreadState {
  dnnl::stream stream{cpu_engine()};
  std::vector<std::byte> scratch;
  void* scratch_for(size_t bytes) {
    if (scratch.size() < bytes + 64) scratch.resize(bytes + 64);
    auto p = reinterpret_cast<uintptr_t>(scratch.data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
  }
};

}  // namespace

// ---------------------------------------------------------------------------

void gemm_dnnl(const GemmDesc& g, const void* A, const void* B, void* C) {
  const Primitive& p = primitive_for(g);
  thread_local ThreadState t;
  dnnl::engine& e = cpu_engine();
  // oneDNN takes non-const handles; A and B are only read.
  dnnl::memory a(p.a, e, const_cast<void*>(A)), b(p.b, e, const_cast<void*>(B)), c(p.c, e, C);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  if (size_t bytes = p.scratchpad.get_size(); bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratchpad, e, t.scratch_for(bytes)));
  }
  p.matmul.execute(t.stream, args);
  t.stream.wait();
}

bool dnnl_has_bf16_instructions() {
  static const bool has = [] {
    auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;  // the ISA values are nested bit sets
  }();
  return has;
}

std::string gemm_dnnl_impl(const GemmDesc& g) {
  return primitive_for(g).impl;
}

std::string dnnl_cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace fanout::ops::cpu
