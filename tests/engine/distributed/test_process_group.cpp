// The Gloo ProcessGroup's reduce-scatter and all-gather (ZeRO across processes)
// against direct computation, with 1 to 4 ranks as threads of this process (one
// Rendezvous each): uneven and empty pieces, ranges that cut pieces, empty
// ranges, f32 and bf16; the bytes each rank sends against the ring's count; the
// calls leave the caller's thread free; a rank that never answers is named; and
// the existing all-reduce beside them. Only the test thread asserts.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <thread>

#include "engine/core/check.h"
#include "engine/parallel/collectives/collectives.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using distributed::ProcessGroup;
namespace rdzv = fanout::test::rdzv;

namespace {

constexpr double kTimeoutS = 10;
constexpr int64_t kN = 37;              // elements per buffer: odd, not a multiple of any world
constexpr double kBf16Unit = 1. / 256;  // bf16 keeps 8 significant bits: |round(x) - x| <= u |x|

// `world` Gloo ranks of one job, each with its own comm stream.
struct Ranks {
  rdzv::Job job;
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  std::vector<std::unique_ptr<Stream>> streams;
  explicit Ranks(int world, double timeout_s = kTimeoutS)
      : job(world, world), groups(rdzv::gloo_groups(job, timeout_s)) {
    for (int r = 0; r < world; ++r)
      streams.push_back(std::make_unique<Stream>(cpu_device(0), "rank " + std::to_string(r)));
  }
  int world() const { return job.world; }
};

// Pieces `bounds` (world+1 entries) of the range [begin, end) of a kN-element buffer.
struct Case {
  std::vector<int64_t> bounds;
  int64_t begin, end;
  int64_t lo(int q) const { return std::max(begin, bounds[q]); }
  int64_t hi(int q) const { return std::min(end, bounds[q + 1]); }
  int64_t size(int q) const { return std::max<int64_t>(0, hi(q) - lo(q)); }
  int owner(int64_t i) const {  // the rank whose piece holds element i, or -1
    for (size_t q = 0; q + 1 < bounds.size(); ++q)
      if (lo(static_cast<int>(q)) <= i && i < hi(static_cast<int>(q))) return static_cast<int>(q);
    return -1;
  }
  int64_t covered() const {
    int64_t n = 0;
    for (size_t q = 0; q + 1 < bounds.size(); ++q) n += size(static_cast<int>(q));
    return n;
  }
};

// Uneven bounds over [0, kN) with an empty piece (rank 1 from 3 ranks on).
std::vector<int64_t> uneven_bounds(int world) {
  switch (world) {
    case 1:
      return {0, kN};
    case 2:
      return {0, 20, kN};
    case 3:
      return {0, 4, 4, kN};
    default:
      return {0, 13, 13, 16, kN};
  }
}

std::vector<Case> cases_for(int world) {
  std::vector<int64_t> inner = shard_bounds(31, world);  // pieces over [3, 34) only
  for (int64_t& b : inner) b += 3;
  return {
      {shard_bounds(kN, world), 0, kN},  // the whole buffer, near-even pieces
      {uneven_bounds(world), 3, 30},     // uneven pieces, the range cuts the outer ones
      {uneven_bounds(world), 11, 14},    // inside one or two pieces: the rest empty
      {inner, 0, kN},                    // pieces cover part of the range
      {shard_bounds(kN, world), 9, 9},   // an empty range
  };
}

// The ring's count (process_group.h): reduce-scatter sends every piece but its
// own, all-gather every piece but rank r+1's.
int64_t reduce_scatter_bytes(const Case& c, int r, size_t elem) {
  return (c.covered() - c.size(r)) * static_cast<int64_t>(elem);
}
int64_t all_gather_bytes(const Case& c, int r, int world, size_t elem) {
  return (c.covered() - c.size((r + 1) % world)) * static_cast<int64_t>(elem);
}

template <typename T>
struct Outcome {
  std::vector<T> values;  // the buffer afterwards
  int64_t bytes = 0;      // bytes_sent() by the call(s)
};
using Op = std::function<void(ProcessGroup&, const Tensor&, Stream&)>;

// Every rank puts inputs[r] in a buffer, runs `op` on it and its own stream, and
// reports the buffer and the bytes it sent.
template <typename T>
std::vector<Outcome<T>> run_on_ranks(Ranks& ranks, DType dtype,
                                     const std::vector<std::vector<T>>& inputs, const Op& op) {
  std::vector<Outcome<T>> out(static_cast<size_t>(ranks.world()));
  rdzv::on_every_rank(ranks.world(), [&](int r) {
    Stream& s = *ranks.streams[r];
    ProcessGroup& g = *ranks.groups[r];
    Tensor buf = tensor_from_vector(s, inputs[r], {kN}, dtype, cpu_device(0));
    g.reset_bytes_sent();
    op(g, buf, s);
    s.synchronize();
    out[r].values = tensor_to_vector<T>(s, buf);
    out[r].bytes = g.bytes_sent();
  });
  return out;
}

// Small integers, different on every rank: f32 sums are exact.
std::vector<std::vector<float>> integer_inputs(int world) {
  std::vector<std::vector<float>> x(world, std::vector<float>(kN));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < kN; ++i) x[r][i] = static_cast<float>((r + 1) * 100 + i % 17 - 8);
  return x;
}

std::vector<std::vector<float>> random_inputs(int world, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::vector<float>> x(world, std::vector<float>(kN));
  for (auto& v : x)
    for (float& f : v) f = u(rng);
  return x;
}

double abs_sum(const std::vector<std::vector<float>>& x, int64_t i) {
  double s = 0;
  for (const auto& v : x) s += std::abs(static_cast<double>(v[i]));
  return s;
}
double exact_sum(const std::vector<std::vector<float>>& x, int64_t i) {
  double s = 0;
  for (const auto& v : x) s += v[i];
  return s;
}

}  // namespace

TEST_CASE("process group: reduce_scatter sums each rank's piece over 1 to 4 gloo ranks (f32)") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    Ranks ranks(world);
    auto x = integer_inputs(world);
    std::vector<Case> cases = cases_for(world);
    for (size_t k = 0; k < cases.size(); ++k) {
      CAPTURE(k);
      const Case& c = cases[k];
      auto got = run_on_ranks<float>(ranks, DType::f32, x,
                                     [&](ProcessGroup& g, const Tensor& b, Stream& s) {
                                       g.reduce_scatter(b, c.bounds, c.begin, c.end, s);
                                     });
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        CHECK(got[r].bytes == reduce_scatter_bytes(c, r, sizeof(float)));
        for (int64_t i = 0; i < kN; ++i) {
          CAPTURE(i);
          int q = c.owner(i);
          if (q == r) CHECK(got[r].values[i] == exact_sum(x, i));
          if (q < 0) CHECK(got[r].values[i] == x[r][i]);  // outside the pieces: untouched
        }
      }
    }
    // The reference is not trivial: the main case moves data between ranks.
    if (world > 1) CHECK(reduce_scatter_bytes(cases[1], 0, sizeof(float)) > 0);
  }
}

TEST_CASE("process group: all_gather gives every rank every piece over 1 to 4 gloo ranks") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    Ranks ranks(world);
    std::vector<Case> cases = cases_for(world);
    auto x = integer_inputs(world);
    std::vector<std::vector<uint16_t>> h(world, std::vector<uint16_t>(kN));  // any bf16 bits
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < kN; ++i) h[r][i] = static_cast<uint16_t>(r * 4099 + i * 7919);
    for (size_t k = 0; k < cases.size(); ++k) {
      CAPTURE(k);
      const Case& c = cases[k];
      Op op = [&](ProcessGroup& g, const Tensor& b, Stream& s) {
        g.all_gather(b, c.bounds, c.begin, c.end, s);
      };
      auto f = run_on_ranks<float>(ranks, DType::f32, x, op);
      auto b = run_on_ranks<uint16_t>(ranks, DType::bf16, h, op);
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        CHECK(f[r].bytes == all_gather_bytes(c, r, world, sizeof(float)));
        CHECK(b[r].bytes == all_gather_bytes(c, r, world, sizeof(uint16_t)));
        for (int64_t i = 0; i < kN; ++i) {
          CAPTURE(i);
          int q = c.owner(i) < 0 ? r : c.owner(i);  // outside the pieces: its own values
          CHECK(f[r].values[i] == x[q][i]);
          CHECK(b[r].values[i] == h[q][i]);
        }
      }
    }
  }
}

TEST_CASE("process group: bf16 reduce_scatter stays within the rounding bound at half the bytes") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    Ranks ranks(world);
    for (Case c : {cases_for(world)[0], cases_for(world)[1]}) {
      auto x = random_inputs(world, 11 + world);
      for (auto& g : ranks.groups) g->set_sum_dtype(DType::bf16);
      auto got = run_on_ranks<float>(ranks, DType::f32, x,
                                     [&](ProcessGroup& g, const Tensor& b, Stream& s) {
                                       g.reduce_scatter(b, c.bounds, c.begin, c.end, s);
                                     });
      // Each contribution sent is rounded once, each partial sum once per hop.
      double bound = world == 1 ? 0 : (2 * world - 3) * kBf16Unit * 1.05;
      double largest_error = 0;
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        CHECK(got[r].bytes == reduce_scatter_bytes(c, r, sizeof(uint16_t)));
        for (int64_t i = c.lo(r); i < c.hi(r); ++i) {
          CAPTURE(i);
          double err = std::abs(got[r].values[i] - exact_sum(x, i));
          CHECK(err <= bound * abs_sum(x, i) + 1e-6 * abs_sum(x, i));
          largest_error = std::max(largest_error, err);
          if (world == 2) {  // the owner's values plus the other's, rounded once, in fp32
            float expect = x[r][i] + bf16_to_float(float_to_bf16(x[1 - r][i]));
            CHECK(got[r].values[i] == expect);
          }
          if (world == 3) {  // the other two rounded, summed in fp32 and rounded for the hop
            auto b = [](float v) { return bf16_to_float(float_to_bf16(v)); };
            float expect = x[r][i] + b(b(x[(r + 1) % 3][i]) + b(x[(r + 2) % 3][i]));
            CHECK(got[r].values[i] == expect);
          }
        }
      }
      if (world > 1) CHECK(largest_error > 1e-5);  // the sums really travelled in bf16
      if (world == 1) CHECK(largest_error == 0);

      // Then the f32 all-gather of the pieces: every rank holds the same bits.
      auto both = run_on_ranks<float>(ranks, DType::f32, x,
                                      [&](ProcessGroup& g, const Tensor& b, Stream& s) {
                                        g.reduce_scatter(b, c.bounds, c.begin, c.end, s);
                                        g.all_gather(b, c.bounds, c.begin, c.end, s);
                                      });
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        CHECK(both[r].bytes == reduce_scatter_bytes(c, r, sizeof(uint16_t)) +
                                   all_gather_bytes(c, r, world, sizeof(float)));
        for (int64_t i = 0; i < kN; ++i) {
          int q = c.owner(i);
          if (q >= 0) CHECK(both[r].values[i] == got[q].values[i]);
        }
      }
      for (auto& g : ranks.groups) g->set_sum_dtype(DType::f32);
    }
  }
}

// An all-reduce is a ring reduce-scatter then a ring all-gather over the range's
// shard_bounds pieces: every piece but its own, then every piece but rank r+1's.
int64_t all_reduce_bytes(int64_t n, int world, int r, size_t elem) {
  if (world == 1) return 0;
  std::vector<int64_t> at = shard_bounds(n, world);
  auto size = [&](int q) { return at[q + 1] - at[q]; };
  return (2 * n - size(r) - size((r + 1) % world)) * static_cast<int64_t>(elem);
}

TEST_CASE("process group: all_reduce still sums over 1 to 4 gloo ranks (f32 and bf16)") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    Ranks ranks(world);
    Op op = [](ProcessGroup& g, const Tensor& b, Stream& s) { g.all_reduce(b, 2, kN, s); };
    auto x = integer_inputs(world);
    auto f = run_on_ranks<float>(ranks, DType::f32, x, op);
    int64_t n = kN - 2;
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(f[r].bytes == all_reduce_bytes(n, world, r, 4));
      for (int64_t i = 0; i < kN; ++i) CHECK(f[r].values[i] == (i < 2 ? x[r][i] : exact_sum(x, i)));
    }
    // Sums that round: still the same bits on every rank, within float's rounding.
    auto z = random_inputs(world, 9);
    auto fz = run_on_ranks<float>(ranks, DType::f32, z, op);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      for (int64_t i = 2; i < kN; ++i) {
        CAPTURE(i);
        CHECK(fz[r].values[i] == fz[0].values[i]);
        CHECK(std::abs(fz[r].values[i] - exact_sum(z, i)) <= 4e-7 * world * abs_sum(z, i));
      }
    }

    auto y = random_inputs(world, 5);
    for (auto& g : ranks.groups) g->set_sum_dtype(DType::bf16);
    auto b = run_on_ranks<float>(ranks, DType::f32, y, op);
    double bound = (2 * world - 1) * kBf16Unit * 1.05;
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(b[r].bytes == all_reduce_bytes(n, world, r, 2));
      for (int64_t i = 2; i < kN; ++i) {
        CAPTURE(i);
        CHECK(b[r].values[i] == b[0].values[i]);  // the same bits on every rank
        CHECK(std::abs(b[r].values[i] - exact_sum(y, i)) <= bound * abs_sum(y, i));
      }
    }
  }
}

TEST_CASE(
    "process group: reduce_scatter and all_gather are queued, leaving the caller's thread "
    "free") {
  // Ranks 1 and 2 call only after rank 0's calls returned: were the calls to block
  // until every rank joined, rank 0 would never return. Host all-reduces (their own
  // tag) run on the callers' threads while the rings run on the streams.
  const int world = 3;
  Ranks ranks(world);
  Case c = cases_for(world)[1];
  auto x = integer_inputs(world);
  std::atomic<bool> rank0_returned{false};
  std::vector<double> host_sums(world);
  auto got =
      run_on_ranks<float>(ranks, DType::f32, x, [&](ProcessGroup& g, const Tensor& b, Stream& s) {
        if (g.rank() > 0) {
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!rank0_returned && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (!rank0_returned) throw std::runtime_error("rank 0's calls did not return");
        }
        g.reduce_scatter(b, c.bounds, c.begin, c.end, s);
        g.all_gather(b, c.bounds, c.begin, c.end, s);
        if (g.rank() == 0) rank0_returned = true;
        double v = g.rank() + 1.0;
        for (int k = 0; k < 3; ++k) g.all_reduce_host(&v, 1);  // 6, then 18, then 54
        host_sums[g.rank()] = v;
      });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(host_sums[r] == 54);
    for (int64_t i = 0; i < kN; ++i) {
      CAPTURE(i);
      CHECK(got[r].values[i] == (c.owner(i) < 0 ? x[r][i] : exact_sum(x, i)));
    }
  }
}

TEST_CASE("process group: a reduce_scatter no rank answers fails with one line naming it") {
  Ranks ranks(2, 1.0);
  Stream& s = *ranks.streams[0];
  Tensor buf = tensor_from_vector(s, std::vector<float>(kN, 1.f), {kN}, DType::f32, cpu_device(0));
  ranks.groups[0]->reduce_scatter(buf, shard_bounds(kN, 2), 0, kN, s);
  std::string what;
  try {
    s.synchronize();
  } catch (const Error& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(what.find("rank 0: reduce-scatter failed: no rank has died (gloo: ") != std::string::npos);
  CHECK(what.find('\n') == std::string::npos);
}
