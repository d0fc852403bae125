#include "apps/train/batch_finder.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "apps/train/device_memory.h"
#include "apps/train/train_batch.h"
#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"

namespace fanout::train {

// Note [Batch-size search]: the unit is a row per data-parallel replica (the
// processes under ddp, a grid's replicas, else the devices), so every size tried
// splits evenly. A trial sets each device's cap to its capacity less the margin,
// builds the run's parts at that size (Training: replicas, engine, optimizer),
// runs two steps and the held-out forward on the run's own first batches, records
// each device's peak and throws everything away; an out-of-memory error (the
// allocator's own, under a cap or a full device) means it does not fit. Nothing
// of the run itself exists yet -- its weights, AdamW state, RNG and data position
// are made afterwards, as for a run started with the chosen size -- so there is
// nothing to restore but the caps. Under ddp each process tries its own share
// alone and the processes agree on each verdict, so all of them search alike
// (zero1-3 across processes then keep their whole state in a trial: the size
// found errs small).

int64_t batch_search(const std::string& mode, int64_t lo, int64_t hi,
                     const std::function<bool(int64_t)>& fits, std::vector<BatchTry>* tried) {
  FANOUT_ASSERT(mode == "power" || mode == "binsearch", "batch search ", mode);
  FANOUT_ASSERT(lo >= 1 && lo <= hi, "batch search over ", lo, "..", hi);
  auto attempt = [&](int64_t n) {
    const bool ok = fits(n);
    if (tried) tried->push_back({n, ok});
    return ok;
  };
  if (!attempt(lo)) return 0;
  int64_t good = lo, bad = 0;
  while (good < hi) {  // doubling: every size fitted so far
    const int64_t next = good > hi / 2 ? hi : good * 2;
    if (!attempt(next)) {
      bad = next;
      break;
    }
    good = next;
  }
  if (mode == "power" || bad == 0) return good;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (attempt(mid) ? good : bad) = mid;
  }
  return good;
}

std::vector<DeviceLimit> batch_limits(const std::vector<Device>& devices, size_t device_memory,
                                      double margin) {
  std::vector<Device> distinct;
  for (const Device& d : devices)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  const int64_t cpus =
      std::count_if(distinct.begin(), distinct.end(), [](const Device& d) { return d.is_cpu(); });
  std::vector<DeviceLimit> out;
  for (const Device& d : distinct) {
    DeviceLimit l{d, device_memory, 0, "--device-memory " + bytes_str(device_memory)};
    if (device_memory == 0 && d.is_cuda()) {
      const CudaDeviceInfo info = cuda_device_info(d.index);
      l.capacity = info.total_bytes;
      l.from = info.name + "'s " + bytes_str(info.total_bytes);
    } else if (device_memory == 0) {
      // CPU devices share this machine's memory: each is tried under an equal share.
      const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
      FANOUT_CHECK(pages > 0 && page > 0,
                   "--batch-size auto: this machine's memory size is unknown: give "
                   "--device-memory SIZE");
      l.capacity = static_cast<size_t>(pages) * static_cast<size_t>(page) /
                   static_cast<size_t>(std::max<int64_t>(cpus, 1));
      l.from = cpus > 1 ? "a 1/" + std::to_string(cpus) + " share of this machine's " +
                              bytes_str(static_cast<size_t>(pages) * static_cast<size_t>(page))
                        : "this machine's " + bytes_str(l.capacity);
    }
    l.limit = static_cast<size_t>(std::floor(static_cast<double>(l.capacity) * (1.0 - margin)));
    out.push_back(l);
  }
  return out;
}

namespace {

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", 100.0 * share);
  return buf;
}

bool out_of_memory(const std::string& what) {
  return what.find("out of memory") != std::string::npos ||
         what.find("of memory, more than this machine's") != std::string::npos;
}

// Every device's cap, given back as the run set it, however the search ends.
class CapsRestore {
 public:
  explicit CapsRestore(const std::vector<DeviceLimit>& limits) {
    for (const DeviceLimit& l : limits)
      saved_.emplace_back(l.device, allocator_for(l.device).capacity());
  }
  ~CapsRestore() {
    for (const auto& [d, cap] : saved_) allocator_for(d).set_capacity(cap);
  }
  CapsRestore(const CapsRestore&) = delete;
  CapsRestore& operator=(const CapsRestore&) = delete;

 private:
  std::vector<std::pair<Device, size_t>> saved_;
};

}  // namespace

void batch_auto_check(const TrainOptions& o, const std::set<std::string>& given, int64_t replicas) {
  if (!o.batch_size_auto) {
    for (const char* flag :
         {"global-batch-size", "max-batch-size", "batch-size-search", "batch-size-margin"}) {
      FANOUT_CHECK(!given.count(flag), "--", flag,
                   " shapes the search of --batch-size auto: give --batch-size auto (a number "
                   "given to --batch-size is already the rows per step)");
    }
    return;
  }
  FANOUT_CHECK(o.micro_batch_sizes.empty(),
               "--batch-size auto finds the rows per step itself: drop --micro-batch-sizes (it "
               "fixes each device's rows)");
  FANOUT_CHECK(!given.count("grad-accum"),
               "--batch-size auto accumulates to --global-batch-size N itself: drop --grad-accum");
  const std::string split = replicas == 1 ? std::string("")
                                          : " split evenly over the " + std::to_string(replicas) +
                                                " data-parallel replicas";
  FANOUT_CHECK(o.global_batch_size == 0 || o.global_batch_size % replicas == 0,
               "--global-batch-size ", o.global_batch_size,
               " cannot be reached exactly: it accumulates batches", split,
               ", so it must be a multiple of ", replicas);
  FANOUT_CHECK(o.max_batch_size == 0 || o.max_batch_size >= replicas, "--max-batch-size ",
               o.max_batch_size, " is below one row for each of the ", replicas,
               " data-parallel replicas");
}

nlohmann::json BatchChoice::to_json() const {
  nlohmann::json peaks = nlohmann::json::object(), caps = nlohmann::json::object();
  for (size_t i = 0; i < limits.size(); ++i) {
    peaks[limits[i].device.str()] = i < peak.size() ? peak[i] : 0;
    caps[limits[i].device.str()] = limits[i].limit;
  }
  nlohmann::json tries = nlohmann::json::array();
  for (const BatchTry& t : tried) tries.push_back({{"rows_per_replica", t.rows}, {"fits", t.fits}});
  return {{"search", mode},
          {"margin", margin},
          {"replicas", replicas},
          {"rows_per_replica", replica_rows},
          {"micro_batch_rows", micro_rows},
          {"grad_accum", grad_accum},
          {"batch_size", batch_size},
          {"tried", tries},
          {"peak_bytes", peaks},
          {"limit_bytes", caps}};
}

std::string BatchChoice::line() const {
  std::string out = "batch size auto (" + mode + ", " + std::to_string(tried.size()) +
                    (tried.size() == 1 ? " trial): " : " trials): ") + std::to_string(batch_size) +
                    " rows per step";
  const std::string per =
      replicas > 1 ? std::to_string(replica_rows) + " per replica x " + std::to_string(replicas)
                   : "";
  if (grad_accum > 1) {
    out += " as " + std::to_string(grad_accum) + " micro-batches of " + std::to_string(micro_rows);
    if (!per.empty()) out += " (" + per + ")";
  } else if (!per.empty()) {
    out += " (" + per + ")";
  }
  out += "; peak";
  bool same_limit = true;
  for (size_t i = 0; i < limits.size(); ++i) {
    out += (i ? ", " : " ") + limits[i].device.str() + " " + bytes_str(peak[i]);
    same_limit =
        same_limit && limits[i].limit == limits[0].limit && limits[i].from == limits[0].from;
  }
  if (same_limit && !limits.empty()) {
    out += " of " + bytes_str(limits[0].limit) + (limits.size() > 1 ? " each (" : " (") +
           limits[0].from + " less the " + percent(margin) + " margin)";
  } else {
    out += " of";
    for (size_t i = 0; i < limits.size(); ++i) out += (i ? ", " : " ") + bytes_str(limits[i].limit);
    out += " (less the " + percent(margin) + " margin)";
  }
  int64_t first_bad = 0;
  for (const BatchTry& t : tried)
    if (!t.fits && (first_bad == 0 || t.rows < first_bad)) first_bad = t.rows;
  if (first_bad > 0) {
    out += "; " + std::to_string(first_bad) + (replicas > 1 ? " per replica" : " rows") +
           " did not fit";
  } else if (replica_rows == hi) {
    out += "; the most the search may try (--max-batch-size, --global-batch-size or the data)";
  }
  return out;
}

BatchChoice batch_size_find(Setup& s, const std::set<std::string>& given, const BatchTrial& trial,
                            const BatchAgree& agree, const BatchSay& say) {
  const TrainOptions o = s.o;
  BatchChoice c;
  c.mode = o.batch_size_search;
  c.margin = o.batch_size_margin;
  c.replicas = setup_replicas(o, s);
  const int64_t W = c.replicas;
  c.lo = setup_min_replica_rows(o, given);
  c.hi = setup_data_rows(s) / W;
  if (o.max_batch_size > 0) c.hi = std::min(c.hi, o.max_batch_size / W);
  if (o.global_batch_size > 0) c.hi = std::min(c.hi, o.global_batch_size / W);
  c.hi = std::max(c.hi, c.lo);  // the smallest batch has been set up already: it fits the data
  std::vector<Device> devices = s.devices;
  if (s.output_device) devices.push_back(*s.output_device);
  const size_t cap =
      o.device_memory.empty() ? 0 : parse_byte_size(o.device_memory, "--device-memory");
  c.limits = batch_limits(devices, cap, c.margin);
  std::map<int64_t, std::vector<size_t>> peaks;
  std::string first_failure;
  auto fits = [&](int64_t rows) {
    CapsRestore restore(c.limits);
    bool ok = true;
    try {
      setup_batch(s, rows * W, 1, given, true);
      for (const DeviceLimit& l : c.limits) {
        Allocator& a = allocator_for(l.device);
        a.set_capacity(l.limit);
        a.reset_peak();
      }
      trial(s);
      std::vector<size_t>& p = peaks[rows];
      for (const DeviceLimit& l : c.limits) p.push_back(allocator_for(l.device).stats().total.peak);
    } catch (const Error& e) {
      if (!out_of_memory(e.what())) throw;
      if (first_failure.empty()) first_failure = e.what();
      ok = false;
    }
    ok = agree(ok);
    if (say) {
      std::string line = "batch size auto: " + std::to_string(rows) +
                         (rows == 1 ? " row" : " rows") + (W > 1 ? " per replica " : " ") +
                         (rows == 1 ? (ok ? "fits" : "does not fit") : (ok ? "fit" : "do not fit"));
      if (ok && peaks.count(rows)) {
        size_t top = 0;
        for (size_t p : peaks[rows]) top = std::max(top, p);
        line += " (peak " + bytes_str(top) + ")";
      }
      say(line);
    }
    return ok;
  };
  c.replica_rows = batch_search(c.mode, c.lo, c.hi, fits, &c.tried);
  const std::string under = c.limits.empty() ? std::string()
                                             : " under " + bytes_str(c.limits[0].limit) + " (" +
                                                   c.limits[0].from + " less the " +
                                                   percent(c.margin) + " margin)";
  FANOUT_CHECK(
      c.replica_rows > 0, "--batch-size auto: not even ", c.lo, c.lo == 1 ? " row" : " rows",
      W > 1 ? " per replica" : "", " fits", under, ": ",
      first_failure.empty() ? std::string("another process ran out of memory") : first_failure);
  c.micro_rows = c.replica_rows * W;
  if (o.global_batch_size > 0) {
    // The largest batch that fits and divides the global batch: accumulated to it.
    const int64_t per_replica = o.global_batch_size / W;
    int64_t r = c.replica_rows;
    while (r >= c.lo && per_replica % r != 0) --r;
    FANOUT_CHECK(r >= c.lo, "--global-batch-size ", o.global_batch_size,
                 " cannot be reached exactly: no batch of ", c.lo, " to ", c.replica_rows,
                 " rows per replica (the ones that fit) divides its ", per_replica,
                 " rows per replica");
    if (!peaks.count(r)) fits(r);  // measured, for the line
    c.replica_rows = r;
    c.micro_rows = r * W;
    c.grad_accum = per_replica / r;
  }
  c.batch_size = c.micro_rows * c.grad_accum;
  c.peak =
      peaks.count(c.replica_rows) ? peaks[c.replica_rows] : std::vector<size_t>(c.limits.size(), 0);
  setup_batch(s, c.batch_size, c.grad_accum, given);
  // The run's peaks are its own, not the trials'.
  for (const DeviceLimit& l : c.limits) allocator_for(l.device).reset_peak();
  return c;
}

}  // namespace fanout::train
