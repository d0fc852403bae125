// The tiled CPU attention kernel (ops/cpu/attention.cpp) in fp32 against the GEMM
// reference in double: sizes off the block size, one query, a KV cache (Tq < Tk),
// GQA groups of 1, 2 and 4, head sizes 16 to 128; that the masked keys are never
// read into a result; and that a many-thread arena gives the one-thread bits.

#include <doctest/doctest.h>

#include <tbb/task_arena.h>

#include <vector>

#include "ops/cpu/attention.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {

struct Case {
  int64_t B, Tq, Tk, H, KV, D;
};
// Blocks are 32 queries by 32 keys: 1, 31, 33, 45, 70 and 100 cut them everywhere.
const Case kCases[] = {{2, 45, 45, 4, 2, 32},  {1, 1, 1, 2, 1, 16},     {1, 70, 70, 4, 4, 64},
                       {2, 33, 33, 8, 2, 128}, {1, 100, 100, 4, 1, 16}, {3, 31, 31, 2, 2, 6},
                       {1, 1, 70, 4, 2, 32},   {2, 5, 45, 4, 1, 64},    {1, 33, 100, 8, 4, 32},
                       {1, 64, 64, 2, 1, 128}};

struct Inputs {
  std::vector<double> q, k, v, dout;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  return {random_vector(c.B * c.Tq * c.H * c.D, seed, -2, 2),
          random_vector(c.B * c.Tk * c.KV * c.D, seed + 1, -2, 2),
          random_vector(c.B * c.Tk * c.KV * c.D, seed + 2, -2, 2),
          random_vector(c.B * c.Tq * c.H * c.D, seed + 3)};
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

Result run_reference(const Case& c, const Inputs& in) {
  Result r{std::vector<double>(in.q.size()), std::vector<double>(c.B * c.H * c.Tq), {}, {}, {}};
  ops::cpu::attention_forward_gemm<double>(r.out.data(), r.lse.data(), in.q.data(), in.k.data(),
                                           in.v.data(), c.B, c.Tq, c.Tk, c.H, c.KV, c.D);
  if (c.Tq == c.Tk) {
    r.dq.resize(in.q.size());
    r.dk.resize(in.k.size());
    r.dv.resize(in.v.size());
    ops::cpu::attention_backward_gemm<double>(r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(),
                                              in.q.data(), in.k.data(), in.v.data(), r.out.data(),
                                              r.lse.data(), c.B, c.Tq, c.H, c.KV, c.D);
  }
  return r;
}

Result run_tiled(const Case& c, const Inputs& in) {
  auto q = cast_vector<float>(in.q), k = cast_vector<float>(in.k), v = cast_vector<float>(in.v);
  auto dout = cast_vector<float>(in.dout);
  std::vector<float> out(q.size()), lse(c.B * c.H * c.Tq);
  ops::cpu::attention_forward_tiled<float>(out.data(), lse.data(), q.data(), k.data(), v.data(),
                                           c.B, c.Tq, c.Tk, c.H, c.KV, c.D);
  Result r{cast_vector<double>(out), cast_vector<double>(lse), {}, {}, {}};
  if (c.Tq == c.Tk) {
    std::vector<float> dq(q.size(), 7.0f), dk(k.size(), 7.0f), dv(v.size(), 7.0f);  // overwritten
    ops::cpu::attention_backward_tiled<float, float>(dq.data(), dk.data(), dv.data(), dout.data(),
                                                     q.data(), k.data(), v.data(), out.data(),
                                                     lse.data(), c.B, c.Tq, c.H, c.KV, c.D);
    r.dq = cast_vector<double>(dq);
    r.dk = cast_vector<double>(dk);
    r.dv = cast_vector<double>(dv);
  }
  return r;
}

}  // namespace

TEST_CASE("tiled fp32 attention equals the double reference, forward and backward") {
  // fp32 against double: the scores and sums round at about 1e-7 relative; 2e-5 is
  // well above what the runs show (about 2e-6) and far below any real error.
  for (const Case& c : kCases) {
    CAPTURE(c.B);
    CAPTURE(c.Tq);
    CAPTURE(c.Tk);
    CAPTURE(c.H);
    CAPTURE(c.KV);
    CAPTURE(c.D);
    Inputs in = make_inputs(c, 21);
    Result expected = run_reference(c, in);
    Result actual = run_tiled(c, in);
    REQUIRE(max_abs(expected.out) > 0.1);
    std::string why;
    CHECK_MESSAGE(all_close(actual.out, expected.out, 2e-5, 2e-5, &why), why);
    CHECK_MESSAGE(all_close(actual.lse, expected.lse, 2e-5, 2e-5, &why), why);
    if (c.Tq != c.Tk) continue;  // backward is training's: Tq == Tk
    if (c.Tq > 1) REQUIRE(max_abs(expected.dq) > 0.1);
    REQUIRE(max_abs(expected.dv) > 0.1);
    CHECK_MESSAGE(all_close(actual.dq, expected.dq, 2e-5, 2e-5, &why), why);
    CHECK_MESSAGE(all_close(actual.dk, expected.dk, 2e-5, 2e-5, &why), why);
    CHECK_MESSAGE(all_close(actual.dv, expected.dv, 2e-5, 2e-5, &why), why);
  }
}

TEST_CASE("tiled attention never reads a masked key: later keys change no earlier result") {
  // Keys and values after position p get other (larger) values: every output, lse and
  // dq of a query at position <= p keeps its bits. Sizes put p inside a diagonal
  // block and before whole key blocks.
  for (const Case& c : {Case{2, 70, 70, 4, 2, 32}, Case{1, 40, 100, 4, 1, 64}}) {
    for (int64_t p : {int64_t{0}, int64_t{37}, int64_t{65}, c.Tk - 2}) {
      CAPTURE(c.Tq);
      CAPTURE(p);
      Inputs in = make_inputs(c, 31);
      Inputs changed = in;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = p + 1; j < c.Tk; ++j)
          for (int64_t x = 0; x < c.KV * c.D; ++x) {
            const int64_t at = (b * c.Tk + j) * c.KV * c.D + x;
            changed.k[at] = 30.0 - changed.k[at];
            changed.v[at] = 50.0 * changed.v[at] + 3.0;
          }
      Result a = run_tiled(c, in), b = run_tiled(c, changed);
      const int64_t off = c.Tk - c.Tq, row = c.H * c.D;
      int64_t compared = 0;
      for (int64_t bi = 0; bi < c.B; ++bi)
        for (int64_t i = 0; i + off <= p && i < c.Tq; ++i) {
          for (int64_t x = 0; x < row; ++x) {
            const int64_t at = (bi * c.Tq + i) * row + x;
            REQUIRE(a.out[at] == b.out[at]);
            if (c.Tq == c.Tk) REQUIRE(a.dq[at] == b.dq[at]);
            ++compared;
          }
          for (int64_t h = 0; h < c.H; ++h)
            REQUIRE(a.lse[(bi * c.H + h) * c.Tq + i] == b.lse[(bi * c.H + h) * c.Tq + i]);
        }
      if (p + 1 >= c.Tk - c.Tq) REQUIRE(compared > 0);
      REQUIRE(a.out != b.out);  // the later queries did see the change
    }
  }
}

TEST_CASE("tiled attention gives the same bits in a one-thread and a four-thread arena") {
  const Case c{4, 45, 45, 4, 2, 32};
  Inputs in = make_inputs(c, 41);
  Result one, four;
  tbb::task_arena(1).execute([&] { one = run_tiled(c, in); });
  tbb::task_arena(4).execute([&] { four = run_tiled(c, in); });
  CHECK(one.out == four.out);
  CHECK(one.lse == four.lse);
  CHECK(one.dq == four.dq);
  CHECK(one.dk == four.dk);
  CHECK(one.dv == four.dv);
}
