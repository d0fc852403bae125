// TensorPeers: T ranks on CPU devices, one host thread each, meeting in mixed
// all_reduce / all_gather / reduce_scatter rounds under random host and stream
// delays; results against a host reference; the host never waits for device work;
// abort releases waiting ranks, reset() makes the group usable again; ranks that
// disagree on a round all throw.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "engine/core/check.h"
#include "engine/core/dtype.h"
#include "engine/core/flat.h"
#include "engine/parallel/step_aborted.h"
#include "engine/parallel/tensor/tensor_peers.h"

using namespace fanout;
using parallel::StepAborted;
using parallel::TensorPeers;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<Device> cpu_devices(int T) {
  std::vector<Device> d;
  for (int r = 0; r < T; ++r) d.push_back(cpu_device(r));
  return d;
}

// One stream per rank, made before the group and outliving it: the Collectives keep
// per-stream staging buffers, so a rank's stream lives as long as the group (as a
// device's compute stream does in the engine).
std::vector<std::unique_ptr<Stream>> rank_streams(int T) {
  std::vector<std::unique_ptr<Stream>> s;
  for (int r = 0; r < T; ++r)
    s.push_back(std::make_unique<Stream>(cpu_device(r), "tp rank " + std::to_string(r)));
  return s;
}

// What each rank's call ended with.
struct RankRun {
  std::vector<std::exception_ptr> errors;
  bool hung = false;  // the guard had to abort the peers to release the ranks
};

// fn(rank) on one std::thread per rank. A rank that throws anything but
// StepAborted calls peers.abort(), as a step's wrapper does. Hang
// guard: ranks not done within `limit` are released by peers.abort() (the test
// then fails on `hung`); ranks that even abort cannot release end the process.
RankRun run_ranks(TensorPeers& peers, const std::function<void(int)>& fn,
                  std::chrono::seconds limit = std::chrono::seconds(20)) {
  const int T = peers.size();
  RankRun run;
  run.errors.resize(T);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < T; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const StepAborted&) {
        run.errors[r] = std::current_exception();
      } catch (...) {
        run.errors[r] = std::current_exception();
        peers.abort();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ++done;
      }
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, limit, [&] { return done == T; })) {
    run.hung = true;
    lock.unlock();
    peers.abort();
    lock.lock();
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == T; })) {
      std::fprintf(stderr, "test_tensor_peers: ranks hang even after abort()\n");
      std::_Exit(1);
    }
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  return run;
}

enum class Outcome { ok, aborted, error, other };

Outcome outcome(const std::exception_ptr& e, std::string* message = nullptr) {
  if (!e) return Outcome::ok;
  try {
    std::rethrow_exception(e);
  } catch (const StepAborted& x) {
    if (message) *message = x.what();
    return Outcome::aborted;
  } catch (const Error& x) {
    if (message) *message = x.what();
    return Outcome::error;
  } catch (const std::exception& x) {
    if (message) *message = x.what();
    return Outcome::other;
  }
}

// ---

enum class Op { all_reduce, all_gather, all_gather_bf16, reduce_scatter };

struct Step {
  Op op = Op::all_reduce;
  int64_t count = 0;                   // n, or part
  std::vector<int> stream_us;          // per rank: a sleep queued before the input is written
  std::vector<int> host_us;            // per rank: a sleep before the call
  std::vector<std::vector<float>> in;  // per rank: the buffer's first len() values
  int64_t len(int T) const { return op == Op::all_reduce ? count : count * T; }
};

// `steps` rounds for T ranks from `seed`: random ops and sizes (1, odd sizes, one
// large round, an empty all_reduce), values in [-1, 1) (bf16-exact for bf16).
std::vector<Step> make_plan(int T, int steps, uint64_t seed, bool sleeps) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  std::vector<Step> plan(steps);
  for (int i = 0; i < steps; ++i) {
    Step& s = plan[i];
    s.op = static_cast<Op>(rng() % 4);
    s.count = s.op == Op::all_reduce ? 1 + rng() % 150 : 1 + rng() % 37;
    if (i == 0) s.count = 1;
    if (i == 7) s.op = Op::all_reduce, s.count = 10007;
    if (i == 8) s.op = Op::reduce_scatter, s.count = 2501;
    if (i == 9) s.op = Op::all_reduce, s.count = 0;
    for (int r = 0; r < T; ++r) {
      s.stream_us.push_back(sleeps && rng() % 2 ? static_cast<int>(rng() % 400) : 0);
      s.host_us.push_back(sleeps && rng() % 2 ? static_cast<int>(rng() % 400) : 0);
      std::vector<float> v(s.len(T));
      for (float& x : v) {
        x = value(rng);
        if (s.op == Op::all_gather_bf16) x = bf16_to_float(float_to_bf16(x));
      }
      s.in.push_back(std::move(v));
    }
  }
  return plan;
}

struct PlanResult {
  RankRun run;
  std::vector<std::vector<std::vector<float>>> out;  // [step][rank]: the buffer after the round
  std::vector<std::vector<int>> seen;                // [step][rank]: ranks that had called
  int64_t bytes_moved = 0;
};

// Every rank replays the plan on its own stream, through one f32 and one bf16
// buffer reused by every round: inputs written and results read on the stream.
PlanResult run_plan(int T, const std::vector<Step>& plan) {
  auto streams = rank_streams(T);
  TensorPeers peers(cpu_devices(T));
  const int S = static_cast<int>(plan.size());
  int64_t most = 1;
  for (const Step& s : plan) most = std::max(most, s.len(T));
  PlanResult res;
  res.out.assign(S, std::vector<std::vector<float>>(T));
  res.seen.assign(S, std::vector<int>(T, -1));
  for (int i = 0; i < S; ++i)
    for (auto& o : res.out[i]) o.resize(plan[i].len(T));
  std::vector<std::atomic<int>> entered(S);
  res.run = run_ranks(peers, [&](int r) {
    const Device dev = cpu_device(r);
    Stream& stream = *streams[r];
    Tensor f32 = Tensor::empty({most}, DType::f32, dev);
    Tensor bf16 = Tensor::empty({most}, DType::bf16, dev);
    for (int i = 0; i < S; ++i) {
      const Step& s = plan[i];
      const bool half = s.op == Op::all_gather_bf16;
      const Tensor& buf = half ? bf16 : f32;
      stream.enqueue([buf, in = &s.in[r], us = s.stream_us[r], half] {
        void* p = buf.raw();
        if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
        for (size_t j = 0; j < in->size(); ++j) {
          if (half)
            static_cast<uint16_t*>(p)[j] = float_to_bf16((*in)[j]);
          else
            static_cast<float*>(p)[j] = (*in)[j];
        }
      });
      if (s.host_us[r]) std::this_thread::sleep_for(std::chrono::microseconds(s.host_us[r]));
      entered[i].fetch_add(1);
      switch (s.op) {
        case Op::all_reduce:
          peers.all_reduce(r, buf, stream, s.count);
          break;
        case Op::all_gather:
        case Op::all_gather_bf16:
          peers.all_gather(r, buf, stream, s.count);
          break;
        case Op::reduce_scatter:
          peers.reduce_scatter(r, buf, stream, s.count);
          break;
      }
      res.seen[i][r] = entered[i].load();
      stream.enqueue([buf, out = &res.out[i][r], half] {
        const void* p = buf.raw();
        for (size_t j = 0; j < out->size(); ++j)
          (*out)[j] = half ? bf16_to_float(static_cast<const uint16_t*>(p)[j])
                           : static_cast<const float*>(p)[j];
      });
    }
    stream.synchronize();
  });
  res.bytes_moved = peers.bytes_moved();
  return res;
}

// Every rank's results against a host reference: sums within 1e-5 (values in
// [-1, 1), at most 4 terms), all_reduce bit-identical across ranks, gathers exact.
void check_plan(int T, const std::vector<Step>& plan, const PlanResult& res) {
  REQUIRE_FALSE(res.run.hung);
  for (int r = 0; r < T; ++r) {
    std::string msg;
    CAPTURE(r);
    REQUIRE_MESSAGE(outcome(res.run.errors[r], &msg) == Outcome::ok, msg);
  }
  bool nonzero = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Step& s = plan[i];
    CAPTURE(i);
    CAPTURE(static_cast<int>(s.op));
    CAPTURE(s.count);
    std::vector<double> sum(s.len(T), 0.0);
    for (int r = 0; r < T; ++r)
      for (size_t j = 0; j < sum.size(); ++j) sum[j] += s.in[r][j];
    int bad = 0;
    for (int r = 0; r < T; ++r) {
      CHECK(res.seen[i][r] == T);  // no rank left before every rank had called
      const std::vector<float>& out = res.out[i][r];
      for (int64_t j = 0; j < s.len(T); ++j) {
        const int64_t q = s.count ? j / s.count : 0;  // the part j is in
        switch (s.op) {
          case Op::all_reduce:
            bad += std::abs(out[j] - sum[j]) > 1e-5;
            bad += std::memcmp(&out[j], &res.out[i][0][j], sizeof(float)) != 0;
            nonzero |= out[j] != 0.f;
            break;
          case Op::all_gather:
          case Op::all_gather_bf16:
            bad += out[j] != s.in[q][j];
            break;
          case Op::reduce_scatter:
            if (q == r) bad += std::abs(out[j] - sum[j]) > 1e-5;
            break;
        }
      }
    }
    CHECK(bad == 0);
  }
  CHECK(nonzero);
  if (T == 1)
    CHECK(res.bytes_moved == 0);
  else
    CHECK(res.bytes_moved > 0);
}

}  // namespace

TEST_CASE("tensor peers: mixed rounds under random delays equal a host reference, T = 1..4") {
  for (int T : {1, 2, 3, 4}) {
    CAPTURE(T);
    const std::vector<Step> plan = make_plan(T, 50, 100 + T, true);
    check_plan(T, plan, run_plan(T, plan));
  }
}

TEST_CASE("tensor peers: back-to-back rounds without delays never mix") {
  // Fast ranks come back at once for the next round, which differs in size.
  for (int T : {2, 4}) {
    CAPTURE(T);
    const std::vector<Step> plan = make_plan(T, 400, 7 + T, false);
    check_plan(T, plan, run_plan(T, plan));
  }
}

TEST_CASE("tensor peers: callers return once queued, never waiting for device work") {
  const int T = 3;
  const int64_t n = 33;
  auto streams = rank_streams(T);
  TensorPeers peers(cpu_devices(T));
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::atomic<int> returned{0};
  std::vector<std::vector<float>> out(T, std::vector<float>(n));
  std::mutex mu;
  std::condition_variable cv;
  bool returned_first = false;
  std::thread opener([&] {
    // Opens the gate once every rank returned (or after 10 s, for the test to fail).
    std::unique_lock<std::mutex> lock(mu);
    returned_first =
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return returned.load() == T; });
    open.set_value();
  });
  RankRun run = run_ranks(peers, [&](int r) {
    Stream& stream = *streams[r];
    Tensor buf = Tensor::empty({n}, DType::f32, cpu_device(r));
    peers.all_reduce(r, buf, stream, n);  // warms the staging buffers up
    stream.synchronize();
    // The stream blocks until the host opens the gate, then writes r + 1 + j.
    stream.enqueue([gate, buf, r, n] {
      float* p = buf.data<float>();
      gate.wait();
      for (int64_t j = 0; j < n; ++j) p[j] = static_cast<float>(r + 1 + j);
    });
    peers.all_reduce(r, buf, stream, n);
    {
      std::lock_guard<std::mutex> lock(mu);
      returned.fetch_add(1);
    }
    cv.notify_all();
    stream.enqueue([buf, o = &out[r]] { std::copy_n(buf.data<float>(), o->size(), o->begin()); });
    stream.synchronize();
  });
  opener.join();
  REQUIRE_FALSE(run.hung);
  CHECK(returned_first);  // every rank returned while its stream was still blocked
  for (int r = 0; r < T; ++r) {
    REQUIRE(outcome(run.errors[r]) == Outcome::ok);
    for (int64_t j = 0; j < n; ++j) CHECK(out[r][j] == static_cast<float>(6 + 3 * j));
  }
}

TEST_CASE(
    "tensor peers: a failed rank aborts the others promptly, and reset() restores the group") {
  const int T = 3;
  const int64_t n = 17;
  for (int failing : {0, 1, 2}) {
    for (bool late : {false, true}) {
      CAPTURE(failing);
      CAPTURE(late);  // another rank arrives only after the abort
      const int latecomer = (failing + 1) % T;
      auto streams = rank_streams(T);
      TensorPeers peers(cpu_devices(T));
      std::atomic<int64_t> aborted_at{0};
      std::vector<int64_t> stopped_at(T, 0);
      auto now_us = [] {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   Clock::now().time_since_epoch())
            .count();
      };
      RankRun run = run_ranks(peers, [&](int r) {
        Stream& stream = *streams[r];
        Tensor buf = Tensor::empty({n}, DType::f32, cpu_device(r));
        flat_fill(stream, buf, 1.f);
        for (int i = 0; i < 3; ++i) peers.all_reduce(r, buf, stream, n);
        if (r == failing) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the others wait
          stream.synchronize();
          aborted_at = now_us();
          throw std::runtime_error("rank failed");
        }
        if (late && r == latecomer) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        try {
          peers.all_reduce(r, buf, stream, n);
        } catch (const StepAborted&) {
          stopped_at[r] = now_us();
          stream.synchronize();
          throw;
        }
      });
      REQUIRE_FALSE(run.hung);
      for (int r = 0; r < T; ++r) {
        CAPTURE(r);
        std::string msg;
        const Outcome o = outcome(run.errors[r], &msg);
        if (r == failing) {
          CHECK(o == Outcome::other);
          CHECK(msg == "rank failed");
          continue;
        }
        CHECK(o == Outcome::aborted);
        CHECK(stopped_at[r] - aborted_at.load() < 2'000'000);  // promptly, not by the guard
      }
      // Until reset() every call throws at once; then rounds work again.
      Tensor b0 = Tensor::empty({n}, DType::f32, cpu_device(0));
      CHECK_THROWS_AS(peers.all_reduce(0, b0, *streams[0], n), StepAborted);
      peers.reset();
      std::vector<std::vector<float>> out(T);
      run = run_ranks(peers, [&](int r) {
        Stream& stream = *streams[r];
        Tensor buf = Tensor::empty({2 * T}, DType::f32, cpu_device(r));
        flat_fill(stream, buf, static_cast<float>(r + 1));
        peers.all_reduce(r, buf, stream, 2 * T);
        peers.reduce_scatter(r, buf, stream, 2);
        out[r] = tensor_to_vector<float>(stream, buf);
      });
      REQUIRE_FALSE(run.hung);
      for (int r = 0; r < T; ++r) {
        std::string msg;
        CAPTURE(r);
        CHECK_MESSAGE(outcome(run.errors[r], &msg) == Outcome::ok, msg);
        if (!msg.empty()) continue;
        CHECK(out[r][2 * r] == 18.f);  // all-reduced to 1 + 2 + 3, then 3 x 6
        CHECK(out[r][2 * r + 1] == 18.f);
      }
    }
  }
}

TEST_CASE("tensor peers: ranks disagreeing on a round all throw, then the group goes on") {
  const int T = 3;
  const int64_t n = 12;
  struct Case {
    const char* name;
    std::function<void(TensorPeers&, int, Stream&, const Tensor& f32, const Tensor& bf16)> call;
  };
  const std::vector<Case> cases = {
      {"another size", [&](TensorPeers& p, int r, Stream& s, const Tensor& f,
                           const Tensor&) { p.all_reduce(r, f, s, r == 2 ? n - 2 : n); }},
      {"another kind",
       [&](TensorPeers& p, int r, Stream& s, const Tensor& f, const Tensor&) {
         if (r == 1)
           p.all_gather(r, f, s, n / T);
         else
           p.all_reduce(r, f, s, n);
       }},
      {"a bf16 sum", [&](TensorPeers& p, int r, Stream& s, const Tensor&,
                         const Tensor& h) { p.reduce_scatter(r, h, s, n / T); }},
      {"a buffer on another device",
       [&](TensorPeers& p, int r, Stream& s, const Tensor& f, const Tensor&) {
         p.all_reduce(r, r == 2 ? Tensor::empty({n}, DType::f32, cpu_device(0)) : f, s, n);
       }},
      {"a buffer too small",
       [&](TensorPeers& p, int r, Stream& s, const Tensor& f, const Tensor&) {
         p.all_gather(r, r == 1 ? f.view(0, {n - 1}) : f, s, n / T);
       }},
  };
  for (const Case& c : cases) {
    for (int first : {0, 1, 2}) {  // who arrives first (states the round)
      CAPTURE(c.name);
      CAPTURE(first);
      auto streams = rank_streams(T);
      TensorPeers peers(cpu_devices(T));
      std::vector<float> after(T);
      RankRun run = run_ranks(peers, [&](int r) {
        Stream& stream = *streams[r];
        Tensor f = Tensor::empty({n}, DType::f32, cpu_device(r));
        Tensor h = Tensor::empty({n}, DType::bf16, cpu_device(r));
        flat_fill(stream, f, 1.f);
        if (r != first) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        bool threw = false;
        try {
          c.call(peers, r, stream, f, h);
        } catch (const Error& e) {
          threw = true;
          if (dynamic_cast<const StepAborted*>(&e)) throw;
          FANOUT_CHECK(std::string(e.what()).find("collective #0") != std::string::npos,
                       "unexpected message: ", e.what());
        }
        FANOUT_CHECK(threw, "rank ", r, " did not throw");
        peers.all_reduce(r, f, stream, n);  // nothing was queued by the refused round
        after[r] = tensor_to_vector<float>(stream, f)[n - 1];
      });
      REQUIRE_FALSE(run.hung);
      for (int r = 0; r < T; ++r) {
        std::string msg;
        CAPTURE(r);
        CHECK_MESSAGE(outcome(run.errors[r], &msg) == Outcome::ok, msg);
        CHECK(after[r] == 3.f);
      }
    }
  }
}
