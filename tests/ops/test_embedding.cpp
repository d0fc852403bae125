// Embedding: forward against a direct gather in double, backward against central
// finite differences, repeated ids accumulating, an out-of-range id surfacing as
// fanout::Error at synchronize(), and the f32 dispatch against double. A bf16 table
// (the bf16 contract) reads into the f32 output exactly. The forward by vocabulary
// shards (tensor parallelism) sums to the whole gather.

#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "engine/core/check.h"
#include "ops/cpu/embedding.h"
#include "ops/embedding.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
struct Sizes {
  int64_t N, C, V;
};
// N > V forces repeated ids; C = 200 spans several channel bands of the backward.
const Sizes kSizes[] = {{1, 1, 1}, {3, 5, 4}, {7, 33, 3}, {50, 200, 7}, {4, 16, 259}};

std::vector<int32_t> random_ids(int64_t N, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(N);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

std::vector<double> forward_double(const std::vector<int32_t>& ids,
                                   const std::vector<double>& table, int64_t N, int64_t C,
                                   int64_t V) {
  std::vector<double> y(N * C);
  ops::cpu::embedding_forward<double>(y.data(), ids.data(), table.data(), N, C, V);
  return y;
}

Tensor i32_tensor(Stream& s, const std::vector<int32_t>& ids) {
  return tensor_from_vector(s, ids, {static_cast<int64_t>(ids.size())}, DType::i32, s.device());
}
}  // namespace

TEST_CASE("embedding forward gathers the table rows named by the ids") {
  for (auto [N, C, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(V);
    auto ids = random_ids(N, V, 1);
    auto table = random_vector(V * C, 2);
    std::vector<double> expected(N * C);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) expected[n * C + c] = table[ids[n] * C + c];
    REQUIRE(max_abs(expected) > 0.01);
    CHECK(forward_double(ids, table, N, C, V) == expected);  // a gather is exact
  }
}

TEST_CASE("embedding backward matches central finite differences") {
  for (auto [N, C, V] : kSizes) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(V);
    auto ids = random_ids(N, V, 3);
    auto table = random_vector(V * C, 4);
    auto dy = random_vector(N * C, 5);
    std::vector<double> dtable(V * C, 0.0);
    ops::cpu::embedding_backward<double>(dtable.data(), dy.data(), ids.data(), N, C, V);
    auto g = numeric_grad(
        [&](const std::vector<double>& t) { return dot(forward_double(ids, t, N, C, V), dy); },
        table);
    REQUIRE(max_abs(g) > 1e-3);
    std::string why;
    CHECK_MESSAGE(all_close(dtable, g, 1e-6, 1e-8, &why), why);
  }
}

TEST_CASE("embedding backward accumulates repeated ids into prior gradient values") {
  // Small integers make every sum exact in f32, so the comparison is exact.
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 5, C = 3, V = 4;
  std::vector<int32_t> ids = {2, 0, 2, 2, 0};
  std::vector<double> dy = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  Tensor tdtable = f32_tensor(s, std::vector<double>(V * C, 100), {V, C});
  ops::embedding_backward(s, tdtable, f32_tensor(s, dy, {N, C}), i32_tensor(s, ids), N, C, V);
  // clang-format off
  std::vector<double> expected = {
      100 + 4 + 13,     100 + 5 + 14,     100 + 6 + 15,      // id 0: dout rows 1, 4
      100,              100,              100,               // id 1: unused
      100 + 1 + 7 + 10, 100 + 2 + 8 + 11, 100 + 3 + 9 + 12,  // id 2: dout rows 0, 2, 3
      100,              100,              100};              // id 3: unused
  // clang-format on
  CHECK(f32_values(s, tdtable) == expected);
}

TEST_CASE("embedding out-of-range token id surfaces as an Error at synchronize") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t C = 4, V = 259;
  Tensor table = f32_tensor(s, random_vector(V * C, 6), {V, C});
  Tensor out = Tensor::empty({3, C}, DType::f32, cpu_device(0));
  // The check runs inside the kernel on the stream thread, so enqueueing succeeds.
  CHECK_NOTHROW(ops::embedding_forward(s, out, i32_tensor(s, {1, 300, 2}), table, 3, C, V));
  CHECK_THROWS_WITH_AS(s.synchronize(),
                       doctest::Contains("token id 300 is out of range for vocabulary size 259"),
                       Error);

  Tensor dtable = f32_tensor(s, std::vector<double>(V * C, 0.0), {V, C});
  Tensor dout = f32_tensor(s, random_vector(2 * C, 7), {2, C});
  ops::embedding_backward(s, dtable, dout, i32_tensor(s, {-1, 0}), 2, C, V);
  CHECK_THROWS_WITH_AS(s.synchronize(),
                       doctest::Contains("token id -1 is out of range for vocabulary size 259"),
                       Error);
  // synchronize() cleared the error: the stream runs work again, and the failed
  // backward wrote nothing.
  CHECK(max_abs(f32_values(s, dtable)) == 0.0);
}

TEST_CASE("embedding f32 dispatch on a CPU device agrees with double and accumulates gradients") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 50, C = 200, V = 7;
  auto ids = random_ids(N, V, 8);
  auto table = random_vector(V * C, 9);
  auto dy = random_vector(N * C, 10);
  std::vector<double> dtable(V * C, 0.25);  // prior gradient values
  auto y = forward_double(ids, table, N, C, V);
  ops::cpu::embedding_backward<double>(dtable.data(), dy.data(), ids.data(), N, C, V);
  Tensor tids = i32_tensor(s, ids), ttable = f32_tensor(s, table, {V, C});
  Tensor ty = Tensor::empty({N, C}, DType::f32, cpu_device(0));
  Tensor tdtable = f32_tensor(s, std::vector<double>(V * C, 0.25), {V, C});
  ops::embedding_forward(s, ty, tids, ttable, N, C, V);
  ops::embedding_backward(s, tdtable, f32_tensor(s, dy, {N, C}), tids, N, C, V);
  std::string why;
  CHECK_MESSAGE(all_close(f32_values(s, ty), y, 1e-6, 1e-7, &why), why);
  CHECK_MESSAGE(all_close(f32_values(s, tdtable), dtable, 1e-5, 1e-5, &why), why);
}

TEST_CASE("embedding forward from a bf16 table equals the f32 table of the same values") {
  // bf16 -> f32 only appends zero bits: no rounding, so the tolerance is zero.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (auto [N, C, V] : {Sizes{1, 1, 1}, Sizes{7, 33, 3}, Sizes{1024, 128, 259}}) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(V);
    auto table = bf16_rounded(random_vector(V * C, 41, -3, 3));
    auto ids = random_ids(N, V, 42);
    Tensor tids = i32_tensor(s, ids);
    Tensor y32 = Tensor::empty({N, C}, DType::f32, cpu_device(0));
    Tensor y16 = Tensor::empty({N, C}, DType::f32, cpu_device(0));
    ops::embedding_forward(s, y32, tids, f32_tensor(s, table, {V, C}), N, C, V);
    ops::embedding_forward(s, y16, tids, bf16_tensor(s, table, {V, C}), N, C, V);
    auto ref = f32_values(s, y32);
    REQUIRE(max_abs(ref) > 0.1);
    CHECK(f32_values(s, y16) == ref);
    CHECK(ref == forward_double(ids, table, N, C, V));
  }
}

TEST_CASE("embedding refuses dtypes outside the bf16 contract") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 2, C = 3, V = 4;
  auto cpu = cpu_device(0);
  Tensor ids = i32_tensor(s, {0, 3});
  Tensor out32 = Tensor::empty({N, C}, DType::f32, cpu),
         out16 = Tensor::empty({N, C}, DType::bf16, cpu);
  Tensor t32 = Tensor::empty({V, C}, DType::f32, cpu),
         t16 = Tensor::empty({V, C}, DType::bf16, cpu);
  Tensor ti = Tensor::empty({V, C}, DType::i32, cpu);
  CHECK_THROWS_AS(ops::embedding_forward(s, out16, ids, t16, N, C, V), InternalError);  // out f32
  CHECK_THROWS_AS(ops::embedding_forward(s, out32, ids, ti, N, C, V), InternalError);
  // backward is f32 only: the table's gradient is an fp32 parameter gradient.
  CHECK_THROWS_AS(ops::embedding_backward(s, t16, out32, ids, N, C, V), InternalError);
  CHECK_THROWS_AS(ops::embedding_backward(s, t32, out16, ids, N, C, V), InternalError);
}

TEST_CASE("embedding backward by rows equals the rows of the whole table gradient") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t N = 9, C = 5, V = 11;
  std::vector<int32_t> ids = {0, 3, 3, 10, 7, 0, 5, 10, 2};  // repeats, both ends
  auto dy = random_vector(N * C, 61);
  std::vector<double> whole(V * C, 0.25);
  ops::cpu::embedding_backward<double>(whole.data(), dy.data(), ids.data(), N, C, V);
  Tensor tids = tensor_from_vector(s, ids, {N}, DType::i32, cpu_device(0));
  Tensor tdy = f32_tensor(s, dy, {N, C});
  for (auto [row0, rows] :
       {std::pair<int64_t, int64_t>{0, V}, {0, 4}, {4, 4}, {8, 3}, {10, 1}, {5, 0}}) {
    CAPTURE(row0);
    CAPTURE(rows);
    std::vector<double> want(whole.begin() + row0 * C, whole.begin() + (row0 + rows) * C);
    std::vector<double> d(rows * C, 0.25);
    ops::cpu::embedding_backward_rows<double>(d.data(), dy.data(), ids.data(), N, C, V, row0, rows);
    CHECK(d == want);
    if (rows == 0) continue;
    Tensor t = f32_tensor(s, std::vector<double>(rows * C, 0.25), {rows, C});
    ops::embedding_backward_rows(s, t, tdy, tids, N, C, V, row0, rows);
    std::string why;
    CHECK_MESSAGE(all_close(f32_values(s, t), want, 1e-6, 1e-6, &why), why);
  }
}

TEST_CASE("embedding forward by rows summed over vocabulary shards equals the whole gather") {
  // Each token's row lies on exactly one shard and the others write zeros: the sum
  // is exact, for an f32 and a bf16 table, with a last shard partly or all padding.
  Stream s(cpu_device(0), "cpu:0 compute");
  for (DType table_t : {DType::f32, DType::bf16}) {
    for (auto [N, C, V] :
         {Sizes{1, 1, 1}, Sizes{7, 33, 9}, Sizes{50, 24, 37}, Sizes{64, 16, 259}}) {
      for (int64_t S : {1, 2, 3, 4}) {
        CAPTURE(dtype_name(table_t));
        CAPTURE(N);
        CAPTURE(V);
        CAPTURE(S);
        auto table = bf16_rounded(random_vector(V * C, 71, -3, 3));
        auto ids = random_ids(N, V, 72);
        ids[0] = static_cast<int32_t>(V - 1);  // the vocabulary's last row
        Tensor tids = i32_tensor(s, ids);
        Tensor whole = Tensor::empty({N, C}, DType::f32, cpu_device(0));
        ops::embedding_forward(s, whole, tids, float_tensor(s, table_t, table, {V, C}), N, C, V);
        const auto want = f32_values(s, whole);
        REQUIRE(max_abs(want) > 0.1);
        const int64_t width = (V + S - 1) / S;
        std::vector<double> sum(N * C, 0.0);
        for (int64_t row0 = 0; row0 < S * width; row0 += width) {
          const int64_t first = std::min(row0, V), rows = std::min(width, V - first);
          std::vector<double> part(table.begin() + first * C, table.begin() + (first + rows) * C);
          Tensor out = f32_tensor(s, std::vector<double>(N * C, 42.0), {N, C});  // overwritten
          ops::embedding_forward_rows(s, out, tids, float_tensor(s, table_t, part, {rows, C}), N, C,
                                      V, first, rows);
          const auto y = f32_values(s, out);
          for (int64_t n = 0; n < N; ++n) {
            const bool here = ids[n] >= first && ids[n] < first + rows;
            for (int64_t c = 0; c < C; ++c) {
              CHECK(y[n * C + c] == (here ? want[n * C + c] : 0.0));
              sum[n * C + c] += y[n * C + c];
            }
          }
        }
        CHECK(sum == want);
      }
    }
  }
}

TEST_CASE("embedding forward by rows rejects an out-of-range id that its shard does not hold") {
  Stream s(cpu_device(0), "cpu:0 compute");
  const int64_t C = 4, V = 259, row0 = 100, rows = 50;
  Tensor table_rows = f32_tensor(s, random_vector(rows * C, 73), {rows, C});
  Tensor out = Tensor::empty({3, C}, DType::f32, cpu_device(0));
  CHECK_NOTHROW(ops::embedding_forward_rows(s, out, i32_tensor(s, {120, 300, 2}), table_rows, 3, C,
                                            V, row0, rows));
  CHECK_THROWS_WITH_AS(s.synchronize(),
                       doctest::Contains("token id 300 is out of range for vocabulary size 259"),
                       Error);
  ops::embedding_forward_rows(s, out, i32_tensor(s, {120, -1, 2}), table_rows, 3, C, V, row0, rows);
  CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("token id -1 is out of range"), Error);
  // The stream runs again, and a shard's last row is its own.
  ops::embedding_forward_rows(s, out, i32_tensor(s, {149, 150, 99}), table_rows, 3, C, V, row0,
                              rows);
  auto y = f32_values(s, out), t = f32_values(s, table_rows);
  for (int64_t c = 0; c < C; ++c) {
    CHECK(y[c] == t[(rows - 1) * C + c]);
    CHECK(y[C + c] == 0.0);
    CHECK(y[2 * C + c] == 0.0);
  }
}
