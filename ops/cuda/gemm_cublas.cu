// cuBLAS GEMMs for ops/cuda/matmul.cu: cublasSgemm for f32, cuBLASLt for bf16
// inputs, cublasGemmEx where Lt refuses a shape. Handles, workspaces and plans
// are created on first use and never destroyed (see cublas_handle).

#include "ops/cuda/gemm_cublas.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/cuda_check.h"
#include "engine/core/cuda_runtime.h"
#include "ops/cuda/common.cuh"

// A cuBLAS or cuBLASLt call that must succeed: the status, the current device,
// the statement and file:line in the message.
#define FANOUT_CUBLAS_CHECK(expr) \
  ::fanout::ops::cuda::cublas_check((expr), #expr, __FILE__, __LINE__)

namespace fanout::ops::cuda {

namespace {

void cublas_check(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  int device = -1;
  cudaGetDevice(&device);
  detail::throw_error(detail::str_cat("cuBLAS error on cuda:", device, ": ",
                                      cublasGetStatusString(st), " in `", what, "` at ", file, ":",
                                      line));
}

// The handle for (current device, stream), created on first use and bound to the
// stream. A handle is not safe to share between threads, a stream is used by
// one thread at a time, so one per stream. Never destroyed: handles outlive
// streams (a new stream at a reused address on the same device simply reuses
// its handle, already bound to that address), and destroying them at exit,
// after the CUDA runtime may have shut down, could crash.
cublasHandle_t cublas_handle(cudaStream_t stream) {
  static std::mutex mu;
  static auto* handles = new std::map<std::pair<int, cudaStream_t>, cublasHandle_t>();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = handles->try_emplace({device, stream}, nullptr);
  if (inserted) {
    cublasHandle_t h = nullptr;
    try {
      FANOUT_CUBLAS_CHECK(cublasCreate(&h));
      FANOUT_CUBLAS_CHECK(cublasSetStream(h, stream));
      // fp32 arithmetic throughout: no TF32 tensor-core shortcut.
      FANOUT_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
      FANOUT_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    } catch (...) {
      if (h) cublasDestroy(h);
      handles->erase(it);
      throw;
    }
    it->second = h;
  }
  return it->second;
}

// Note [cuBLASLt plans]
// bf16 GEMMs run through cuBLASLt, which leaves the choice of kernel to the
// caller: cublasLtMatmulAlgoGetHeuristic is asked once per GemmKey (device,
// shape, transposes, leading dimensions, dtypes, beta == 0, epilogue and the
// alignment class of the four pointers, since the heuristic picks vectorised
// kernels only for pointers it is promised are aligned) and its first answer is
// kept with the matmul descriptor and layouts that asked. Plans are only read
// after creation, so threads share them. The Lt handle is one per device (a
// cublasLtHandle_t carries no stream and may be used from several threads); the
// workspace is one per (device, stream), since GEMMs on two streams may run at
// once and GEMMs on one stream never do, of gemm_workspace_bytes, allocated on
// first use and kept, like the handles. A shape Lt has no algorithm for (none
// from the heuristic, or CUBLAS_STATUS_NOT_SUPPORTED from cublasLtMatmul) runs
// through cublasGemmEx instead, with one line on stderr the first time: a refusal
// never stops a run. Any other status throws.

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static auto* handles = new std::map<int, cublasLtHandle_t>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(device);
  if (it == handles->end()) {
    cublasLtHandle_t h = nullptr;
    FANOUT_CUBLAS_CHECK(cublasLtCreate(&h));
    it = handles->emplace(device, h).first;
  }
  return it->second;
}

size_t workspace_bytes(int device) {
  int major = 0;
  FANOUT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return gemm_workspace_bytes(major);
}

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

Workspace lt_workspace(int device, cudaStream_t stream) {
  static std::mutex mu;
  static auto* spaces = new std::map<std::pair<int, cudaStream_t>, Workspace>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = spaces->find({device, stream});
  if (it == spaces->end()) {
    Workspace w{nullptr, workspace_bytes(device)};
    FANOUT_CUDA_CHECK(cudaMalloc(&w.ptr, w.bytes));  // 256-byte aligned, as Lt wants
    it = spaces->emplace(std::make_pair(device, stream), w).first;
  }
  return it->second;
}

cudaDataType_t cuda_type(DType t) {
  FANOUT_ASSERT(t == DType::f32 || t == DType::bf16, "matmul: no cuBLAS type for ", dtype_name(t));
  return t == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
}

cublasOperation_t cublas_op(bool trans) {
  return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// The descriptors of one GemmKey and the heuristic's answers for it, best first;
// `chosen` indexes the one that runs (0 until timed). use_lt turns false (once,
// with the stderr line) when Lt refuses the shape.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, cd = nullptr;  // C and D share a layout
  cublasLtMatmulAlgo_t algos[kGemmCandidates]{};                  // never changed after creation
  int candidates = 0;
  std::atomic<int> chosen{0};
  std::atomic<bool> use_lt{false};
  std::atomic<bool> timed{false};
  std::mutex timing;  // one thread times a plan's candidates

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // only a plan whose creation threw is destroyed
    if (cd) cublasLtMatrixLayoutDestroy(cd);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

void report_fallback(const ColMajorGemm& g, const char* status) {
  std::fprintf(stderr, "%s\n", gemm_fallback_message(g, status).c_str());
}

std::unique_ptr<LtPlan> lt_plan_create(const GemmKey& key, const ColMajorGemm& g) {
  auto p = std::make_unique<LtPlan>();
  FANOUT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = cublas_op(key.transa), tb = cublas_op(key.transb);
  const auto epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
  FANOUT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  FANOUT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  FANOUT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                     &epilogue, sizeof epilogue));
  // Stored shapes: op(A) (m, k) is A (k, m) when transposed; op(B) (k, n) likewise.
  FANOUT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p->a, cuda_type(key.a), key.transa ? key.k : key.m, key.transa ? key.m : key.k, key.lda));
  FANOUT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &p->b, cuda_type(key.b), key.transb ? key.n : key.k, key.transb ? key.k : key.n, key.ldb));
  FANOUT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->cd, cuda_type(key.d), key.m, key.n, key.ldc));
  FANOUT_ASSERT(key.c == key.d, "matmul: cuBLASLt plan with C ", dtype_name(key.c), " and D ",
                dtype_name(key.d));

  cublasLtMatmulPreference_t pref = nullptr;
  FANOUT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
  const size_t ws = workspace_bytes(key.device);
  const auto align = static_cast<uint32_t>(key.alignment);
  FANOUT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    FANOUT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align));
  }
  cublasLtMatmulHeuristicResult_t results[kGemmCandidates]{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(key.device), p->desc, p->a, p->b, p->cd, p->cd, pref,
                                     kGemmCandidates, results, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    report_fallback(g, cublasGetStatusString(st));
  } else {
    cublas_check(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (found == 0 || results[0].state != CUBLAS_STATUS_SUCCESS) {
      report_fallback(g,
                      found == 0 ? "no heuristic result" : cublasGetStatusString(results[0].state));
    } else {
      for (int i = 0; i < found; ++i) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->candidates++] = results[i].algo;
      }
      p->use_lt = true;
    }
  }
  return p;
}

// The plan for `key`, created on first use; never destroyed (Note [cuBLASLt plans]).
LtPlan& lt_plan(const GemmKey& key, const ColMajorGemm& g) {
  static std::mutex mu;
  static auto* plans = new std::unordered_map<GemmKey, LtPlan*, GemmKeyHash>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, lt_plan_create(key, g).release()).first;
  return *it->second;
}

// Note [Timed GEMM algorithms]
// With gemm_set_algo_choice(timed), a plan's candidates (the heuristic's best
// answers) are timed once, at the plan's first call outside a stream recording
// (a recording cannot wait for its events), on that call's own operands and
// stream: one untimed call, then kTimedRuns calls between two events, each
// candidate in turn, the host waiting for the last event. With beta 0 the calls
// write D, which the real call then overwrites; with beta != 0 D is also an
// input, so they write a zeroed scratch of D's size instead, and a scratch the
// device cannot spare (or over kTimedScratchMax) leaves the heuristic's answer.
// gemm_pick keeps the fastest unless it beats the first answer by at most
// kGemmTimedMargin. A candidate that refuses the shape is skipped. Threads that
// share a plan (replicas on one device) wait for its timing, so every call after
// it runs the same kernel; set back to heuristic, every plan runs its first answer
// again. The choice rests on timings: two runs may choose differently and differ
// in the last bits, which is why it is not the default.

constexpr int kTimedRuns = 3;
constexpr size_t kTimedScratchMax = size_t(256) << 20;

// Two timing events on a device for a scope.
struct TimingEvents {
  void* start;
  void* stop = nullptr;
  explicit TimingEvents(int device) : start(cuda_timing_event_create(device)) {
    try {
      stop = cuda_timing_event_create(device);
    } catch (...) {
      cuda_event_destroy(start);
      throw;
    }
  }
  ~TimingEvents() {
    cuda_event_destroy(stop);
    cuda_event_destroy(start);
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

// The operands of one GEMM call.
struct GemmCall {
  const void* A;
  const void* B;  // at b_offset already
  float beta;
  const void* C;
  void* D;
};

// Candidate i of a plan on a call's operands.
cublasStatus_t lt_matmul(LtPlan& p, int i, int device, const GemmCall& call, const Workspace& ws,
                         cudaStream_t s) {
  const float alpha = 1.0f;
  return cublasLtMatmul(lt_handle(device), p.desc, &alpha, call.A, p.a, call.B, p.b, &call.beta,
                        call.C, p.cd, call.D, p.cd, &p.algos[i], ws.ptr, ws.bytes, s);
}

void lt_plan_time(LtPlan& p, const ColMajorGemm& g, DType cd, int device, cudaStream_t s,
                  const GemmCall& call) {
  if (p.timed.load(std::memory_order_acquire) || cuda_stream_capturing(s)) return;
  std::lock_guard<std::mutex> lock(p.timing);
  if (p.timed.load(std::memory_order_relaxed)) return;
  if (p.candidates < 2) {
    p.timed.store(true, std::memory_order_release);
    return;
  }
  GemmCall run = call;  // with beta != 0, into the scratch
  const size_t bytes = call.beta != 0.0f ? size_t(g.ldc) * size_t(g.n) * dtype_size(cd) : 0;
  // Out of memory is no error here: the heuristic's answer stays.
  const StreamScratch scratch(bytes <= kTimedScratchMax ? bytes : 0, s, std::nothrow);
  if (call.beta != 0.0f) {
    if (!scratch.as<void>()) {
      p.timed.store(true, std::memory_order_release);
      return;
    }
    FANOUT_CUDA_CHECK(cudaMemsetAsync(scratch.as<void>(), 0, bytes, s));
    run.C = run.D = scratch.as<void>();
  }

  const Workspace ws = lt_workspace(device, s);
  TimingEvents ev(device);
  std::vector<double> ms(p.candidates, -1.0);
  for (int i = 0; i < p.candidates; ++i) {
    const cublasStatus_t st = lt_matmul(p, i, device, run, ws, s);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) continue;
    cublas_check(st, "cublasLtMatmul", __FILE__, __LINE__);
    cuda_event_record(ev.start, s);
    for (int r = 0; r < kTimedRuns; ++r)
      cublas_check(lt_matmul(p, i, device, run, ws, s), "cublasLtMatmul", __FILE__, __LINE__);
    cuda_event_record(ev.stop, s);
    ms[i] = cuda_event_elapsed_ms(ev.start, ev.stop) / kTimedRuns;
  }
  const int pick = gemm_pick(ms, kGemmTimedMargin);
  p.chosen.store(pick < 0 ? 0 : pick, std::memory_order_release);
  p.timed.store(true, std::memory_order_release);
}

// cublasSgemm and cublasGemmEx accumulate in place (D = op(A) op(B) + beta D): a C
// other than D is first copied into D, only the m valid rows of each column.
void copy_c_into_d(cudaStream_t s, const ColMajorGemm& g, float beta, const void* C, void* D,
                   DType cd) {
  if (beta == 0.0f || C == D) return;
  const size_t es = dtype_size(cd);
  FANOUT_CUDA_CHECK(
      cudaMemcpy2DAsync(D, g.ldc * es, C, g.ldc * es, g.m * es, g.n, cudaMemcpyDeviceToDevice, s));
}

// D = op(A) op(B) + beta C through cublasGemmEx.
void gemm_ex(cudaStream_t s, const ColMajorGemm& g, const void* A, const void* B, float beta,
             const void* C, void* D, DType cd) {
  copy_c_into_d(s, g, beta, C, D, cd);
  const float alpha = 1.0f;
  FANOUT_CUBLAS_CHECK(cublasGemmEx(
      cublas_handle(s), cublas_op(g.transa), cublas_op(g.transb), static_cast<int>(g.m),
      static_cast<int>(g.n), static_cast<int>(g.k), &alpha, A, CUDA_R_16BF, static_cast<int>(g.lda),
      B, CUDA_R_16BF, static_cast<int>(g.ldb), &beta, D, cuda_type(cd), static_cast<int>(g.ldc),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Every dimension the int-indexed cuBLAS API takes fits an int, and none is empty.
void check_dims(const ColMajorGemm& g) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) {
    FANOUT_CHECK(v > 0 && v <= INT32_MAX, "matmul: GEMM dimension ", v, " (M=", g.m, " N=", g.n,
                 " K=", g.k, ") does not fit cuBLAS' 32-bit integers");
  }
}

}  // namespace

// ---------------------------------------------------------------------------

void gemm_f32(void* stream, const ColMajorGemm& g, const float* A, const float* B, float beta,
              const float* C, float* D) {
  check_dims(g);
  auto s = static_cast<cudaStream_t>(stream);
  copy_c_into_d(s, g, beta, C, D, DType::f32);
  const float alpha = 1.0f;
  FANOUT_CUBLAS_CHECK(
      cublasSgemm(cublas_handle(s), cublas_op(g.transa), cublas_op(g.transb), static_cast<int>(g.m),
                  static_cast<int>(g.n), static_cast<int>(g.k), &alpha, A, static_cast<int>(g.lda),
                  B + g.b_offset, static_cast<int>(g.ldb), &beta, D, static_cast<int>(g.ldc)));
}

void gemm_bf16(void* stream, const ColMajorGemm& g, const void* A, const void* B, float beta,
               const void* C, void* D, DType cd) {
  check_dims(g);
  auto s = static_cast<cudaStream_t>(stream);
  const int device = current_device();
  const void* b = static_cast<const uint16_t*>(B) + g.b_offset;
  if (beta == 0.0f) C = D;  // not read; D's layout and alignment stand for it
  const GemmKey key = gemm_key(device, g, DType::bf16, cd, beta == 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                               gemm_alignment({A, b, C, D}));
  LtPlan& plan = lt_plan(key, g);
  if (plan.use_lt.load(std::memory_order_relaxed)) {
    // Heuristic: its first answer, even for a plan timed earlier in the process.
    const bool timed = gemm_algo_choice() == GemmAlgoChoice::timed;
    const GemmCall call{A, b, beta, C, D};
    if (timed) lt_plan_time(plan, g, cd, device, s, call);
    const cublasStatus_t st =
        lt_matmul(plan, timed ? plan.chosen.load(std::memory_order_acquire) : 0, device, call,
                  lt_workspace(device, s), s);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublas_check(st, "cublasLtMatmul", __FILE__, __LINE__);
    if (plan.use_lt.exchange(false)) report_fallback(g, cublasGetStatusString(st));
  }
  gemm_ex(s, g, A, b, beta, C, D, cd);
}

}  // namespace fanout::ops::cuda
