// GPU: embedding gather and scatter-add on cuda:0 against the CPU dispatcher,
// with repeated ids, and the documented handling of an out-of-range id; the
// gather by vocabulary shards (tensor parallelism) too.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "ops/embedding.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct EmbeddingSizes {
  int64_t N, C, V;
};
// V < N repeats ids; the last case has thousands of tokens per table row.
const EmbeddingSizes kEmbeddingSizes[] = {
    {1, 1, 1}, {7, 5, 3}, {300, 129, 50}, {4096, 64, 1000}, {8192, 33, 2}};
}  // namespace

TEST_CASE("embedding forward and backward on cuda:0 match the CPU") {
  CpuAndCuda s;
  for (auto [N, C, V] : kEmbeddingSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(V);
    auto ids_host = random_ids(N, 1, 0, static_cast<int32_t>(V - 1));
    TensorPair ids = i32_pair(s, ids_host, {N});
    TensorPair table = f32_pair(s, random_vector(V * C, 2), {V, C});
    TensorPair out = f32_pair(s, random_vector(N * C, 3), {N, C});
    ops::embedding_forward(s.cpu, out.cpu, ids.cpu, table.cpu, N, C, V);
    ops::embedding_forward(s.gpu, out.gpu, ids.gpu, table.gpu, N, C, V);
    check_cuda_equals_cpu(s, out, "out");

    TensorPair dout = f32_pair(s, random_vector(N * C, 4), {N, C});
    TensorPair dtable = f32_pair(s, random_vector(V * C, 5), {V, C});  // accumulated into
    ops::embedding_backward(s.cpu, dtable.cpu, dout.cpu, ids.cpu, N, C, V);
    ops::embedding_backward(s.gpu, dtable.gpu, dout.gpu, ids.gpu, N, C, V);
    // atomicAdd order differs from the CPU's token order: sums of about N/V terms
    // in [-1, 1], whose fp32 rounding grows as the square root of their count
    // (N = 8192, V = 2 differed by 1.5e-4 on an H100). A lost or doubled term
    // would be off by about 0.5.
    const double terms = static_cast<double>(N) / static_cast<double>(V);
    check_cuda_matches_cpu(s, dtable, 1e-5, 1e-4 * std::max(1.0, std::sqrt(terms)), "dtable");
  }
}

TEST_CASE("embedding on cuda:0 writes NaN for an out-of-range id and skips it in backward") {
  CpuAndCuda s;
  const int64_t N = 3, C = 4, V = 5;
  Tensor ids =
      tensor_from_vector(s.gpu, std::vector<int32_t>{1, 5, -1}, {N}, DType::i32, cuda_device(0));
  Tensor table = f32_tensor(s.gpu, random_vector(V * C, 6), {V, C});
  Tensor out = Tensor::empty({N, C}, DType::f32, cuda_device(0));
  ops::embedding_forward(s.gpu, out, ids, table, N, C, V);
  auto y = f32_values(s.gpu, out);
  auto t = f32_values(s.gpu, table);
  for (int64_t c = 0; c < C; ++c) {
    CHECK(y[c] == t[1 * C + c]);
    CHECK(std::isnan(y[C + c]));
    CHECK(std::isnan(y[2 * C + c]));
  }
  Tensor dtable = f32_tensor(s.gpu, std::vector<double>(V * C, 0.0), {V, C});
  Tensor dout = f32_tensor(s.gpu, std::vector<double>(N * C, 1.0), {N, C});
  ops::embedding_backward(s.gpu, dtable, dout, ids, N, C, V);
  auto dt = f32_values(s.gpu, dtable);
  double total = 0;
  for (double g : dt) total += g;
  CHECK(total == C);  // only id 1's row received its gradient
  CHECK(dt[1 * C] == 1.0);
}

TEST_CASE("embedding forward by rows on cuda:0 matches the CPU for every vocabulary shard") {
  // A gather: bit for bit, f32 and bf16 tables, the vector path (C = 64) and the
  // scalar one, a last shard partly or wholly padding (V = 9 over 4 shards).
  CpuAndCuda s;
  struct Case {
    int64_t N, C, V, S;
  };
  for (DType table_t : {DType::f32, DType::bf16}) {
    for (auto [N, C, V, S] : {Case{7, 5, 9, 4}, Case{300, 129, 50, 3}, Case{4096, 64, 1000, 4}}) {
      CAPTURE(dtype_name(table_t));
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(V);
      CAPTURE(S);
      TensorPair ids = i32_pair(s, random_ids(N, 11, 0, static_cast<int32_t>(V - 1)), {N});
      const std::vector<double> table = bf16_rounded(random_vector(V * C, 12));
      const int64_t width = (V + S - 1) / S;
      for (int64_t k = 0; k < S; ++k) {
        const int64_t row0 = std::min(k * width, V), rows = std::min(width, V - row0);
        CAPTURE(row0);
        std::vector<double> part(table.begin() + row0 * C, table.begin() + (row0 + rows) * C);
        Tensor tc = float_tensor(s.cpu, table_t, part, {rows, C});
        Tensor tg = float_tensor(s.gpu, table_t, part, {rows, C});
        TensorPair out = f32_pair(s, random_vector(N * C, 13), {N, C});  // overwritten
        ops::embedding_forward_rows(s.cpu, out.cpu, ids.cpu, tc, N, C, V, row0, rows);
        ops::embedding_forward_rows(s.gpu, out.gpu, ids.gpu, tg, N, C, V, row0, rows);
        CHECK(f32_values(s.gpu, out.gpu) == f32_values(s.cpu, out.cpu));
      }
    }
  }
}

TEST_CASE(
    "embedding forward by rows on cuda:0 writes zeros for other shards and NaN out of range") {
  CpuAndCuda s;
  const int64_t N = 4, C = 8, V = 10, row0 = 4, rows = 3;
  Tensor ids = tensor_from_vector(s.gpu, std::vector<int32_t>{5, 9, 10, -1}, {N}, DType::i32,
                                  cuda_device(0));
  Tensor table_rows = f32_tensor(s.gpu, random_vector(rows * C, 14), {rows, C});
  Tensor out = Tensor::empty({N, C}, DType::f32, cuda_device(0));
  ops::embedding_forward_rows(s.gpu, out, ids, table_rows, N, C, V, row0, rows);
  auto y = f32_values(s.gpu, out);
  auto t = f32_values(s.gpu, table_rows);
  for (int64_t c = 0; c < C; ++c) {
    CHECK(y[c] == t[(5 - row0) * C + c]);
    CHECK(y[C + c] == 0.0);  // id 9: another shard's row
    CHECK(std::isnan(y[2 * C + c]));
    CHECK(std::isnan(y[3 * C + c]));
  }
}
