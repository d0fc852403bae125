// The host-side plan of attention on CUDA (ops/attention_plan.h) and the selection
// API of ops/attention.h, on any machine: cuDNN's view of our tensor layouts, the
// support predicate's edges, the cache key, the path each setting takes, the
// describe lines and the fallback message.

#include <doctest/doctest.h>

#include <string>
#include <unordered_set>

#include "engine/core/check.h"
#include "ops/attention.h"
#include "ops/attention_plan.h"

using namespace fanout;
using namespace fanout::ops;

namespace {

// Restores the process-wide setting after a test changes it.
struct ImplScope {
  explicit ImplScope(AttentionImpl impl) : previous(attention_impl()) { attention_set_impl(impl); }
  ~ImplScope() { attention_set_impl(previous); }
  ImplScope(const ImplScope&) = delete;
  ImplScope& operator=(const ImplScope&) = delete;
  AttentionImpl previous;
};

// The element offset of index (i0, i1, i2, i3) under a layout.
int64_t offset(const SdpaLayout& l, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * l.strides[0] + i1 * l.strides[1] + i2 * l.strides[2] + i3 * l.strides[3];
}

const AttentionDirection kFwd = AttentionDirection::forward;
const AttentionDirection kBwd = AttentionDirection::backward;

}  // namespace

TEST_CASE("cuDNN layouts address our (B, T, H, D) tensors element for element") {
  const SdpaShape s{3, 17, 12, 3, 24};
  const auto [B, T, H, KV, D] = s;
  const SdpaLayout q = sdpa_layout_q(s), kv = sdpa_layout_kv(s);
  const SdpaLayout kvt = sdpa_layout_kv_transposed(s), st = sdpa_layout_stats(s);
  CHECK(q.dims == std::array<int64_t, 4>{B, H, T, D});
  CHECK(kv.dims == std::array<int64_t, 4>{B, KV, T, D});
  CHECK(kvt.dims == std::array<int64_t, 4>{B, KV, D, T});
  CHECK(st.dims == std::array<int64_t, 4>{B, H, T, 1});
  // q[b, t, h, d] sits at ((b T + t) H + h) D + d; k[b, t, kh, d] likewise with KV.
  for (int64_t b : {0L, 2L})
    for (int64_t t : {0L, 5L, 16L})
      for (int64_t d : {0L, 23L}) {
        for (int64_t h : {0L, 11L}) CHECK(offset(q, b, h, t, d) == ((b * T + t) * H + h) * D + d);
        for (int64_t kh : {0L, 2L}) {
          const int64_t want = ((b * T + t) * KV + kh) * D + d;
          CHECK(offset(kv, b, kh, t, d) == want);
          CHECK(offset(kvt, b, kh, d, t) == want);  // the transpose: the same element
        }
      }
  // lse (B, H, T), packed.
  CHECK(offset(st, 2, 7, 16, 0) == (2 * H + 7) * T + 16);
  CHECK(offset(st, B - 1, H - 1, T - 1, 0) == B * H * T - 1);
}

TEST_CASE("the score layouts are one matrix and its transpose, full heads are packed") {
  const SdpaShape s{2, 5, 4, 2, 8};
  const SdpaLayout sc = sdpa_layout_scores(s), sct = sdpa_layout_scores_transposed(s);
  CHECK(sc.dims == sct.dims);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 5; ++j) CHECK(offset(sc, 1, 3, i, j) == offset(sct, 1, 3, j, i));
  CHECK(offset(sc, 1, 3, 4, 4) == 2 * 4 * 5 * 5 - 1);
  const SdpaLayout f = sdpa_layout_full_heads(s);
  CHECK(f.dims == std::array<int64_t, 4>{2, 4, 5, 8});
  CHECK(offset(f, 1, 3, 4, 7) == 2 * 4 * 5 * 8 - 1);
  CHECK(f.strides[3] == 1);
}

TEST_CASE("the cuDNN support predicate's edges") {
  const int64_t v919 = 91900;
  auto ok = [&](AttentionDirection dir, int64_t T, int64_t H, int64_t KV, int64_t D,
                int64_t version = 91900, int sm = 9, bool bf16 = true) {
    return sdpa_unsupported_reason(dir, bf16, T, T, H, KV, D, version, sm) == nullptr;
  };
  CHECK(ok(kFwd, 512, 12, 3, 64));
  CHECK(ok(kBwd, 512, 12, 3, 128));
  CHECK(ok(kBwd, 17, 4, 4, 8));                         // odd T: fine from 9.16 on
  CHECK(ok(kFwd, 1, 4, 1, 64));                         // one query and key: the forward takes it
  CHECK_FALSE(ok(kBwd, 1, 4, 1, 64));                   // the backward does not
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 64, v919, 9, false));  // f32
  CHECK(sdpa_unsupported_reason(kFwd, true, 1, 9, 4, 1, 64, v919, 9) != nullptr);  // Tq < Tk
  // Head dims: multiples of 8, up to 256 on Hopper, 128 elsewhere.
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 12));
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 60));
  CHECK(ok(kFwd, 64, 4, 1, 8));
  CHECK(ok(kFwd, 64, 4, 1, 256));
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 264));
  CHECK(ok(kFwd, 64, 4, 1, 128, v919, 10));
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 136, v919, 10));
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 64, v919, 7));  // pre-Ampere
  CHECK_FALSE(ok(kFwd, 64, 6, 4, 64));           // H % KV != 0
  // Versions: cuDNN 8; the 9.10.0/9.10.1 backward; odd T before 9.16.
  CHECK_FALSE(ok(kFwd, 64, 4, 1, 64, 8907));
  CHECK_FALSE(ok(kBwd, 128, 4, 1, 64, 91000));
  CHECK(ok(kFwd, 128, 4, 1, 64, 91000));
  CHECK(ok(kBwd, 256, 4, 1, 64, 91500));
  CHECK_FALSE(ok(kBwd, 129, 4, 1, 64, 91500));
  CHECK(ok(kBwd, 129, 4, 1, 64, 91600));
}

TEST_CASE("the SDPA cache key tells every field apart and hashes equal keys equally") {
  const SdpaKey base{0, {2, 512, 12, 3, 64}, kFwd};
  SdpaKeyHash hash;
  SdpaKey same = base;
  CHECK(same == base);
  CHECK(hash(same) == hash(base));
  std::unordered_set<SdpaKey, SdpaKeyHash> set{base};
  SdpaKey variants[] = {base, base, base, base, base, base, base};
  variants[0].device = 1;
  variants[1].shape.B = 3;
  variants[2].shape.T = 513;
  variants[3].shape.H = 24;
  variants[4].shape.KV = 4;
  variants[5].shape.D = 128;
  variants[6].direction = kBwd;
  for (const SdpaKey& v : variants) {
    CHECK_FALSE(v == base);
    CHECK(set.count(v) == 0);
    set.insert(v);
  }
  CHECK(set.size() == 8);
  // T and B swapped: a different problem, and (for a decent hash) another bucket value.
  const SdpaKey swapped{0, {512, 2, 12, 3, 64}, kFwd};
  CHECK_FALSE(swapped == base);
  CHECK(hash(swapped) != hash(base));
}

TEST_CASE("attention_path per setting, storage, build and library") {
  using P = AttentionPath;
  using I = AttentionImpl;
  // CPU devices ignore the setting.
  CHECK(attention_path(I::cudnn, false, false, false, false) == P::cpu);
  // automatic: cuDNN only for bf16 with a build and a library that have it.
  CHECK(attention_path(I::automatic, true, true, true, true) == P::cudnn);
  CHECK(attention_path(I::automatic, true, false, true, true) == P::exact);
  CHECK(attention_path(I::automatic, true, true, false, false) == P::exact);
  CHECK(attention_path(I::automatic, true, true, true, false) == P::exact);
  // exact: always.
  CHECK(attention_path(I::exact, true, true, true, true) == P::exact);
  // cudnn: bf16 and cuDNN, or a usage error.
  CHECK(attention_path(I::cudnn, true, true, true, true) == P::cudnn);
  CHECK_THROWS_WITH_AS(attention_path(I::cudnn, true, false, true, true),
                       doctest::Contains("--attention cudnn needs --precision bf16"), Error);
  CHECK_THROWS_WITH_AS(attention_path(I::cudnn, true, true, false, false),
                       doctest::Contains("this build has no cuDNN"), Error);
  CHECK_THROWS_AS(attention_path(I::cudnn, true, true, true, false), Error);
}

TEST_CASE("attention_impl_parse takes auto, exact and cudnn and lists them otherwise") {
  CHECK(attention_impl_parse("auto") == AttentionImpl::automatic);
  CHECK(attention_impl_parse("exact") == AttentionImpl::exact);
  CHECK(attention_impl_parse("cudnn") == AttentionImpl::cudnn);
  for (const char* bad : {"", "CUDNN", "automatic", "flash"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(attention_impl_parse(bad),
                         doctest::Contains("(choose auto, exact or cudnn)"), Error);
  }
}

TEST_CASE("attention_set_impl is process-wide and read back") {
  CHECK(attention_impl() == AttentionImpl::automatic);  // the default
  {
    ImplScope scope(AttentionImpl::exact);
    CHECK(attention_impl() == AttentionImpl::exact);
    attention_set_impl(AttentionImpl::cudnn);
    CHECK(attention_impl() == AttentionImpl::cudnn);
  }
  CHECK(attention_impl() == AttentionImpl::automatic);
}

TEST_CASE("attention_describe: the CPU kernel, the exact setting, and each CUDA case") {
  CHECK(attention_describe(cpu_device(0), DType::f32) == "CPU tiled kernel (fp32 math)");
  CHECK(attention_describe(cpu_device(0), DType::bf16).rfind("CPU tiled kernel", 0) == 0);
  {
    ImplScope scope(AttentionImpl::exact);
    CHECK(attention_describe(cuda_device(0), DType::bf16) == "exact kernel");
    CHECK(attention_describe(cuda_device(0), DType::f32) == "exact kernel");
  }
  using I = AttentionImpl;
  CHECK(attention_describe_cuda(I::automatic, true, true, true, 91900, 0) ==
        "cuDNN fused SDPA (cuDNN 9.19.0)");
  CHECK(attention_describe_cuda(I::cudnn, true, true, true, 91002, 1) ==
        "cuDNN fused SDPA (cuDNN 9.10.2); cuDNN refused 1 shape, those use the exact kernel");
  CHECK(
      attention_describe_cuda(I::automatic, true, true, true, 91900, 3).find("refused 3 shapes") !=
      std::string::npos);
  CHECK(attention_describe_cuda(I::automatic, true, false, false, 0, 0) ==
        "exact kernel (this build has no cuDNN)");
  CHECK(attention_describe_cuda(I::automatic, false, true, true, 91900, 0) ==
        "exact kernel (cuDNN's fused attention is bf16 only)");
  CHECK(attention_describe_cuda(I::automatic, true, true, false, 0, 0) ==
        "exact kernel (the cuDNN library does not load)");
  CHECK(attention_describe_cuda(I::exact, true, true, true, 91900, 0) == "exact kernel");
}

TEST_CASE("the cuDNN fallback line names the direction, the shape and the reason") {
  CHECK(sdpa_refusal_message(kFwd, {2, 512, 12, 3, 64}, "CUDNN_STATUS_NOT_SUPPORTED") ==
        "attention: cuDNN refused the forward graph for B=2 T=512 H=12 KV=3 D=64 "
        "(CUDNN_STATUS_NOT_SUPPORTED); using the exact kernel");
  CHECK(sdpa_refusal_message(kBwd, {1, 17, 4, 1, 12}, "head dim not a multiple of 8") ==
        "attention: cuDNN refused the backward graph for B=1 T=17 H=4 KV=1 D=12 "
        "(head dim not a multiple of 8); using the exact kernel");
  CHECK(cudnn_version_string(91900) == "9.19.0");
  CHECK(cudnn_version_string(90102) == "9.1.2");
  CHECK(cudnn_version_string(100003) == "10.0.3");
}
