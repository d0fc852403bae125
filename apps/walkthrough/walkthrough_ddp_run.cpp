#include "apps/walkthrough/walkthrough_ddp_run.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/data/data_loader.h"
#include "apps/presentation/device_peak.h"
#include "apps/train/ddp_env.h"
#include "apps/train/training.h"
#include "apps/walkthrough/walkthrough_narrator.h"
#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/trace.h"
#include "engine/distributed/launcher_env.h"
#include "engine/distributed/process_group.h"
#include "engine/distributed/rendezvous.h"
#include "engine/distributed/rendezvous_server.h"
#include "engine/parallel/strategy.h"
#include "models/llama_model.h"

namespace fanout::walkthrough::walk {

namespace {

// Bounds the rendezvous, the Gloo mesh and every collective: a rank that fails
// makes the others fail within it, never hang.
constexpr std::chrono::milliseconds kTimeout{60000};

// Why the ranks cannot run here as threads over Gloo; "" when they can.
std::string ddp_run_refusal(const std::vector<Device>& devices) {
  const std::string launch =
      strf("; on CUDA devices run fanout launch --nproc-per-node %zu -- train --strategy ddp",
           devices.size() < 2 ? size_t{2} : devices.size());
  if (devices.size() < 2)
    return "it needs two or more distinct CPU devices (one Gloo rank each)" + launch;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& dev = devices[i];
    if (!dev.is_cpu())
      return dev.str() + " is a CUDA device, and this run's ranks are threads talking over Gloo " +
             "on CPU devices only" + launch;
    if (dev.is_bare())
      return "it needs CPU devices with an index (cpu:0,cpu:1), one per rank, not a bare cpu";
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == dev)
        return dev.str() + " is listed twice, and ddp puts one rank on each device: it needs " +
               "two or more distinct CPU devices";
  }
  return "";
}

// The calling thread's hold on the ranks between the narrated and the timed
// steps: every rank arrives (done, or failed) and waits while the calling thread
// switches the trace recorder off, so that no rank records a timed step or
// loses a narrated one's spans.
class Handoff {
 public:
  explicit Handoff(int ranks) : waiting_(ranks) {}
  void arrive() {
    std::lock_guard<std::mutex> lock(mu_);
    --waiting_;
    cv_.notify_all();
  }
  void wait_released() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return released_; });
  }
  void wait_arrivals() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ <= 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_;
  bool released_ = false;
};

// The first failure of any thread; the others are usually its consequences.
class FirstError {
 public:
  void note(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_) first_ = std::move(e);
  }
  void rethrow() {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

// What one rank measured, read by the calling thread after the join.
struct RankRecord {
  std::vector<double> loss_sums, counts;  // per narrated step
  int64_t last_sent = 0;                  // bytes_sent() over the last narrated step
  std::vector<double> timed_ms;
  int64_t t0_us = 0, t1_us = 0;  // rank 0: the last narrated step's window
};

// Puts the trace recorder back as it was, however the run ends.
class TraceRestore {
 public:
  TraceRestore() : was_(Trace::global().enabled()) {}
  ~TraceRestore() { Trace::global().set_enabled(was_); }
  TraceRestore(const TraceRestore&) = delete;
  TraceRestore& operator=(const TraceRestore&) = delete;

 private:
  bool was_;
};

}  // namespace

void ddp_step_run(const WalkthroughOptions& o, const data::TokenData& data, WalkthroughDdp& d) {
  d.refused = ddp_run_refusal(o.devices);
  d.ran = false;
  d.measured_sent.clear(), d.losses.clear(), d.memory.clear(), d.timed_ms.clear();
  d.last = {};
  if (!d.refused.empty()) return;
  const int W = static_cast<int>(o.devices.size());
  FANOUT_ASSERT(d.world == W && d.rows.size() == o.devices.size(), "the ddp figures are for ",
                d.world, " ranks, the devices ", W);
  for (int r = 0; r < W; ++r) {
    train::DdpEnv env;
    env.rank = r, env.world = W;
    FANOUT_ASSERT(env.rows_of(o.batch_size) == d.rows[r], "rank ", r, "'s rows");
  }

  // Rank 0's rendezvous server, bound here first so that every rank knows its port.
  distributed::RendezvousOptions meet;
  meet.addr = "127.0.0.1", meet.port = 0, meet.world = W, meet.timeout = kTimeout;
  meet.secret = distributed::random_secret(), meet.job = "fanout walkthrough ddp";
  std::unique_ptr<distributed::RendezvousServer> server = distributed::Rendezvous::serve(meet);
  meet.port = server->port();

  std::vector<AllocatorStats> before;
  for (const Device& dev : o.devices) {
    before.push_back(allocator_for(dev).stats());
    allocator_for(dev).reset_peak();
  }
  Trace& trace = Trace::global();
  TraceRestore restore;
  trace.set_enabled(true);

  const parallel::Mode* ddp = parallel::mode_find("ddp");
  FANOUT_ASSERT(ddp, "no mode named ddp");
  std::vector<RankRecord> records(static_cast<size_t>(W));
  Handoff handoff(W);
  FirstError error;

  // A rank's error, noted inside its catch; a rank that fails before the
  // hand-off still arrives, so that the calling thread never waits for it.
  auto fail = [&](int r, bool& arrived) {
    try {
      throw;
    } catch (const Error& e) {
      error.note(std::make_exception_ptr(Error(strf("the walkthrough's ddp rank %d (%s): %s", r,
                                                    o.devices[r].str().c_str(), e.what()))));
    } catch (...) {
      error.note(std::current_exception());
    }
    if (!arrived) handoff.arrive();
    arrived = true;
  };
  // Rank r's Training and steps over its group.
  auto steps = [&](int r, distributed::ProcessGroup& group, bool& arrived) {
    RankRecord& rec = records[r];
    // Every rank has got here: a host all-reduce of one scalar, bounded by the
    // group's timeout (a std::barrier would wait forever for a failed rank).
    auto barrier = [&] {
      double x = 0;
      group.all_reduce_host(&x, 1);
    };
    train::TrainingOptions options;
    options.config = o.config;
    options.devices = {o.devices[r]};
    train::training_options_set_mode(options, *ddp);
    options.bucket_mb = o.bucket_mb;
    options.group = &group;
    // Seed 1, the modes' weights; Training broadcasts rank 0's to the others.
    train::Training training(options, train::InitialWeights{});
    const float lr = training.options().adam.lr;
    data::DataLoader loader(data, o.batch_size, o.seq_len, true, false, 0, models::kIgnoreIndex);
    train::DdpEnv env;
    env.rank = r, env.world = W;
    // The step's window holds every rank's spans and no others: a rank's
    // traced work before the step ended before it entered a barrier that rank
    // 0 had left when it took t0; each rank starts the step only after rank 0
    // has taken t0 and entered the next barrier; t1 follows one after the step.
    barrier();
    for (int step = 1; step <= o.steps; ++step) {
      const data::Batch b = loader.next();  // the global batch; `rows` point into it
      const parallel::HostBatch rows = env.batch_rows(b);
      const int64_t t0 = trace.now_us();
      barrier();
      const int64_t sent0 = group.bytes_sent();
      const train::Training::StepResult res =
          training.step(rows, static_cast<double>(b.counted()), step, lr, 1.0);
      rec.last_sent = group.bytes_sent() - sent0;
      rec.loss_sums.push_back(res.loss.loss_sum);
      rec.counts.push_back(static_cast<double>(res.loss.count));
      barrier();
      rec.t0_us = t0, rec.t1_us = trace.now_us();
    }
    handoff.arrive();
    arrived = true;
    handoff.wait_released();
    for (int k = 1; k <= o.timed_steps; ++k) {
      const data::Batch b = loader.next();
      const parallel::HostBatch rows = env.batch_rows(b);
      barrier();
      const auto w0 = std::chrono::steady_clock::now();
      training.step(rows, static_cast<double>(b.counted()), o.steps + k, lr, 1.0);
      rec.timed_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
    }
  };
  // One rank, as `fanout launch` runs each: its rendezvous, group and Training
  // are made and destroyed on its own thread.
  auto rank_main = [&](int r) {
    bool arrived = false;
    try {
      distributed::RendezvousOptions mine = meet;
      mine.rank = r;
      auto rendezvous = r == 0 ? std::make_unique<distributed::Rendezvous>(mine, std::move(server))
                               : std::make_unique<distributed::Rendezvous>(mine);
      rendezvous->wait_for_all(kTimeout);
      std::unique_ptr<distributed::ProcessGroup> group =
          distributed::make_gloo_group(*rendezvous, kTimeout.count() / 1000.0);
      try {
        steps(r, *group, arrived);
      } catch (...) {
        // Noted while this rank's group is still open: the others see it close
        // only after, so the first error is the cause, not a peer's echo of it.
        fail(r, arrived);
      }
    } catch (...) {
      fail(r, arrived);
    }
  };

  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (...) {
      error.note(std::current_exception());
      for (int k = r; k < W; ++k) handoff.arrive();  // the ranks that never started
      break;
    }
  }
  handoff.wait_arrivals();
  std::vector<presentation::DevicePeak> memory;
  try {
    trace.set_enabled(false);
    // Memory over the start-up and the narrated steps, before the timed ones.
    memory = presentation::device_peaks_above(o.devices, before);
  } catch (...) {
    error.note(std::current_exception());
  }
  handoff.release();
  for (std::thread& t : threads) t.join();
  error.rethrow();

  // The global loss of each step: every rank's sum over every rank's count.
  for (int s = 0; s < o.steps; ++s) {
    double sum = 0, count = 0;
    for (const RankRecord& rec : records) sum += rec.loss_sums[s], count += rec.counts[s];
    d.losses.push_back(sum / count);
  }
  for (const RankRecord& rec : records) d.measured_sent.push_back(rec.last_sent);
  d.memory = std::move(memory);
  d.timed_ms = records[0].timed_ms;
  if (o.steps > 0) {
    d.last.t0_us = records[0].t0_us, d.last.t1_us = records[0].t1_us;
    d.last.spans = spans_between(d.last.t0_us, d.last.t1_us);
  }
  d.ran = true;
}

}  // namespace fanout::walkthrough::walk
