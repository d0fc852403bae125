#include "apps/walkthrough/walkthrough_zero.h"

#include <algorithm>
#include <functional>

namespace fanout::walkthrough::walk {

namespace {

using parallel::Strategy;

const WalkthroughMode* find_mode(const std::vector<WalkthroughMode>& done,
                                 const std::string& name) {
  for (const WalkthroughMode& m : done)
    if (m.name == name) return &m;
  return nullptr;
}

bool distinct_devices(const ZeroRun& z) {
  for (size_t i = 0; i < z.devices.size(); ++i)
    for (size_t k = i + 1; k < z.devices.size(); ++k)
      if (z.devices[i] == z.devices[k]) return false;
  return true;
}

// "cpu:0 1.2 MiB, cpu:1 1.1 MiB": one kind (or the total) of each device's peak.
std::string per_device(const std::vector<presentation::DevicePeak>& memory, const MemTag* kind) {
  std::string s;
  for (const presentation::DevicePeak& d : memory)
    s += strf("%s%s %s", s.empty() ? "" : ", ", d.device.c_str(),
              bytes_str(kind ? d.tag(*kind) : d.peak_bytes).c_str());
  return s;
}

size_t largest(const std::vector<presentation::DevicePeak>& memory, MemTag kind) {
  size_t most = 0;
  for (const presentation::DevicePeak& d : memory) most = std::max(most, d.tag(kind));
  return most;
}

// Elements each replica owns: a piece of every unit.
std::vector<int64_t> owned_elements(const ZeroRun& z) {
  std::vector<int64_t> owned(z.devices.size(), 0);
  for (const auto& sh : z.shards) owned[sh.replica] += sh.end - sh.begin;
  return owned;
}

}  // namespace

std::string unit_name(const ZeroRun& z, size_t unit) {
  if (unit == 0) return "embedding";
  if (unit + 1 == z.units.size()) return "head";
  return strf("layer %zu", unit - 1);
}

GatherBytes zero3_gather_bytes(const ZeroRun& z, const std::vector<int64_t>& rows) {
  GatherBytes g;
  for (size_t r = 0; r < z.devices.size(); ++r) {
    if (r < rows.size() && rows[r] == 0) continue;  // idle: runs neither pass
    for (size_t u = 0; u < z.units.size(); ++u) {
      int64_t missing = 0;
      for (const auto& sh : z.shards) {
        if (z.devices[sh.replica] == z.devices[r]) continue;  // a copy within the device
        int64_t lo = std::max(sh.begin, z.units[u].begin), hi = std::min(sh.end, z.units[u].end);
        if (hi > lo) missing += hi - lo;
      }
      g.forward += missing * z.working_bytes;
      if (u > 0 && u + 1 < z.units.size()) g.backward += missing * z.working_bytes;
    }
  }
  return g;
}

void zero_intro(Prose& p, const ZeroRun& z) {
  const bool z3 = z.strategy == Strategy::zero3;
  if (!z3) {
    p.more(
        "as zero1, each device owns a shard and keeps AdamW state for it only -- here an even "
        "piece of every unit, as FSDP shards each flat parameter, so every device sends and "
        "receives as much as any other; but no device builds the whole gradient buffer: backward "
        "accumulates each unit (the "
        "embedding, a decoder layer, the head) into a buffer of the unit's size, and once every "
        "replica has queued that unit's backward the buffers are reduce-scattered on the comm "
        "streams, each owner adds its piece to its fp32 gradient shard, and the buffers are freed "
        "(a new one waits until those before it were reduced). The weights stay whole on every "
        "device and the update "
        "is all-gathered, as with zero1");
  } else {
    p.more(
        "zero2 with the weights sharded too: a device keeps only its shard of the fp32 master "
        "weights. Before a unit runs, the device's fetch stream gathers the unit's pieces from "
        "their owners into a buffer of the unit's size, fetching the next unit meanwhile, and "
        "frees it once the compute stream is past it (at most 2 units per device at a time). "
        "Forward gathers every unit; backward gathers the layers again, last first: the head "
        "stays gathered from forward to backward and the embedding's backward reads no weights. "
        "Gradients are reduce-scattered unit by unit as with zero2, and the update needs no "
        "all-gather: the shards are the weights");
  }
  const char* kept = z3 ? "master weights, gradients, AdamW m and v" : "gradients, AdamW m and v";
  std::vector<int64_t> owned(z.devices.size(), 0), pieces(z.devices.size(), 0);
  for (const auto& sh : z.shards) owned[sh.replica] += sh.end - sh.begin, ++pieces[sh.replica];
  for (size_t r = 0; r < z.devices.size(); ++r) {
    p.more(
        strf("  %s owns %lld elements in %lld pieces, one of each unit: %s in each fp32 "
             "buffer it keeps of them (%s)",
             z.devices[r].str().c_str(), (long long)owned[r], (long long)pieces[r],
             bytes_str(static_cast<size_t>(owned[r]) * 4).c_str(), kept));
  }
  std::string units;
  for (size_t u = 0; u < z.units.size(); ++u) {
    const parallel::ParamUnit& pu = z.units[u];
    units +=
        strf("%s%s [%lld, %lld) %s", u ? ", " : "", unit_name(z, u).c_str(), (long long)pu.begin,
             (long long)pu.end, bytes_str(static_cast<size_t>(pu.end - pu.begin) * 4).c_str());
  }
  p.more(strf("  %zu units, in forward order (f32 sizes): ", z.units.size()) + units);
}

void zero_reduce(Prose& p, const ZeroRun& z, const WalkthroughMode& m, double reduce_s,
                 const std::vector<WalkthroughMode>& done) {
  const WalkthroughMode* zero1 = find_mode(done, "zero1");
  std::string same;
  if (zero1 && zero1->sums_sent == m.sums_sent)
    same =
        ", as many as zero1's one reduce-scatter after backward: the same sums, cut at the "
        "units' edges";
  else if (zero1)
    same = strf(" (zero1's one reduce-scatter after backward: %lld)", (long long)zero1->sums_sent);
  p.line("reduce",
         strf("reduce-scattered during backward, each unit as soon as every replica had "
              "finished it (%zu units, the head first): %lld bytes of gradients crossed "
              "devices%s; after backward the host waited %s for the last ones",
              z.units.size(), (long long)m.sums_sent, same.c_str(), ms(reduce_s).c_str()));
  std::string held;
  const std::vector<int64_t> owned = owned_elements(z);
  for (size_t r = 0; r < owned.size(); ++r)
    held += strf("%s%s %lld (%s)", held.empty() ? "" : ", ", z.devices[r].str().c_str(),
                 (long long)owned[r], bytes_str(static_cast<size_t>(owned[r]) * 4).c_str());
  p.more("each device now holds the summed gradients of its shard only, elements: " + held);
  if (z.strategy != Strategy::zero3) return;

  const int64_t predicted = m.gather_forward + m.gather_backward;
  std::string check = predicted == m.weights_sent
                          ? std::string("what the units predict, to the byte")
                          : strf("the units predict %lld", (long long)predicted);
  p.line("gathers", strf("%lld bytes of weights crossed devices for this step's gathers (%s): "
                         "%lld in forward, every unit's pieces a device does not own, and %lld in "
                         "backward, the %zu layers once more",
                         (long long)m.weights_sent, check.c_str(), (long long)m.gather_forward,
                         (long long)m.gather_backward, z.units.size() - 2));
  if (distinct_devices(z)) {
    const int64_t P = z.units.back().end;
    std::string lacks, idle;
    for (size_t r = 0; r < owned.size(); ++r) {
      const std::string dev = z.devices[r].str();
      if (r < m.rows.size() && m.rows[r] == 0) {
        idle += (idle.empty() ? "" : ", ") + dev;
        continue;
      }
      lacks += strf("%s%s %lld", lacks.empty() ? "" : ", ", dev.c_str(), (long long)(P - owned[r]));
    }
    p.more(strf("per pass a device fetches all of the %lld weights but its own shard, %lld bytes "
                "each: %s",
                (long long)P, (long long)z.working_bytes, lacks.c_str()) +
           (idle.empty() ? "" : "; " + idle + " had no rows and fetched nothing"));
  } else {
    p.more("pieces owned by a replica on the same device are copied within it and not counted");
  }
}

void zero_compare(Prose& p, const ZeroRun& z, const WalkthroughMode& m,
                  const std::vector<WalkthroughMode>& done) {
  const bool z3 = z.strategy == Strategy::zero3;
  const WalkthroughMode* dp = find_mode(done, "dp-output");
  const WalkthroughMode* zero1 = find_mode(done, "zero1");
  const WalkthroughMode* zero2 = find_mode(done, "zero2");
  // zero2 shards the gradients zero1 held whole; zero3 the weights zero2 held whole.
  const WalkthroughMode* whole = z3 ? zero2 : zero1;
  if (!dp || !zero1 || !whole || m.memory.empty()) return;
  const MemTag kind = z3 ? MemTag::params : MemTag::grads;
  const char* what = z3 ? "params" : "grads";
  const presentation::DevicePeak& w0 = whole->memory[0];
  p.line("changed",
         strf("%s peak per device %s, vs %s on %s with %s and %s with dp-output", what,
              per_device(m.memory, &kind).c_str(), bytes_str(w0.tag(kind)).c_str(),
              w0.device.c_str(), whole->name.c_str(), bytes_str(dp->memory[0].tag(kind)).c_str()));
  // A device keeps its shard and what is in flight: zero3 two gathered units;
  // gradients one range at a time (a layer at most: the embedding's and an untied
  // lm_head's come in blocks of rows no larger than a layer).
  std::vector<int64_t> sizes;
  for (const auto& u : z.units) sizes.push_back(u.end - u.begin);
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  const int64_t two = sizes[0] + (sizes.size() > 1 ? sizes[1] : 0);
  const int64_t per = z3 ? z.working_bytes : 4;
  const int64_t shard0 = owned_elements(z)[0];
  std::string why =
      z3 ? strf(
               "a device keeps its shard (%s on %s) plus the units in flight, at most 2 gathered "
               "at once (the two largest units: %s)",
               bytes_str(static_cast<size_t>(shard0) * 4).c_str(), z.devices[0].str().c_str(),
               bytes_str(static_cast<size_t>(two * per)).c_str())
         : strf(
               "a device keeps its shard (%s on %s) plus the gradient of the part backward is "
               "producing: a new buffer waits until the ones before it were reduced",
               bytes_str(static_cast<size_t>(shard0) * 4).c_str(), z.devices[0].str().c_str());
  if (largest(m.memory, kind) < w0.tag(kind)) {
    p.more(why + strf(": no device ever holds the whole %s buffer", what));
  } else {
    p.more(why + strf(". Here that is no less than the whole buffer: with %zu layers, the units "
                      "in flight outweigh the part of the %s a device no longer keeps. The shard "
                      "shrinks as 1/N with more devices while what is in flight stays, so the "
                      "saving shows with more devices or more, smaller layers",
                      z.units.size() - 2, what));
  }
  if (z3) {
    if (zero2->update_sent > 0)
      p.more(
          strf("the price is traffic: %lld bytes of weights gathered per step vs zero2's "
               "all-gather of %lld after its update (x%.2f)",
               (long long)m.weights_sent, (long long)zero2->update_sent,
               double(m.weights_sent) / double(zero2->update_sent)));
  } else {
    const MemTag opt = MemTag::optimizer;
    p.more("optimizer state as zero1's: " + per_device(m.memory, &opt) + " (zero1: " +
           per_device(zero1->memory, &opt) + "); params whole on every device, as zero1's");
  }
  p.more("total peak " + per_device(m.memory, nullptr) + "; zero1 " +
         per_device(zero1->memory, nullptr) + "; dp-output " + per_device(dp->memory, nullptr));
}

}  // namespace fanout::walkthrough::walk
