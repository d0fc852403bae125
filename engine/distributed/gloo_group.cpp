// GlooGroup: ProcessGroup over Gloo's TCP transport. The Rendezvous serves as
// Gloo's key-value store for connectFullMesh. Gradient all-reduces run on the
// caller's (CPU) stream as blocking host work, outside the device's compute
// arena, so backward keeps computing while buckets travel. Every collective is
// ours, on the context's pairs and unbound buffers (Note [Gloo rings over uneven
// pieces]), never gloo's own: each wait must go through the GlooWatch, which ends
// it when a rank dies (gloo leaves some waits on a dead peer to the timeout).

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/distributed/gloo_mesh.h"
#include "engine/distributed/gloo_watch.h"
#include "engine/distributed/process_group.h"

namespace fanout::distributed {

namespace {

using Clock = std::chrono::steady_clock;

// Separate slots keep gradient buckets (comm stream), ZeRO's weight gathers
// (fetch stream) and host scalars (host thread) from pairing with each other
// when they overlap.
constexpr uint32_t kGradTag = 1, kScalarTag = 2, kBroadcastTag = 3, kReduceScatterTag = 4,
                   kAllGatherTag = 5, kGradGatherTag = 6;
// Our slots: a prefix none of gloo's own collectives uses (gloo/types.h).
constexpr uint8_t kRingSlotPrefix = 0x40;

uint64_t slot_for(uint32_t tag) {
  return gloo::Slot::build(kRingSlotPrefix, tag);
}

// Note [Gloo rings over uneven pieces]
// Both ZeRO collectives, and the all-reduce (a reduce-scatter then an all-gather
// over near-even pieces), are rings on the context's pairs: W-1 steps, at each
// of which every rank sends one piece to rank r+1 and receives one from rank
// r-1. Reduce-scatter: at step s rank r sends piece r-s-1 (its own values at
// s = 0, else the partial sum it just received plus its own) and receives piece
// r-s-2, so the last step brings it the sum of piece r over the others: piece q
// is summed in the order q+1, q+2, ..., q, the same bits on every rank once the
// all-gather has copied it. All-gather: rank r sends piece r-s and receives
// piece r-s-1 (in place). An empty piece is skipped by its sender and its
// receiver alike, so every send meets its receive. A rank sends every piece but
// one: reduce-scatter all but its own, all-gather all but rank r+1's -- (W-1)/W
// of an evenly cut range each, 2 (W-1)/W for an all-reduce.

// Piece q of [begin, end) is [at[q], at[q+1]): the bounds clamped to the range
// (the same pieces as [max(begin, bounds[q]), min(end, bounds[q+1]))).
std::vector<int64_t> piece_edges(const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  std::vector<int64_t> at(bounds.size());
  for (size_t q = 0; q < bounds.size(); ++q) at[q] = std::clamp(bounds[q], begin, end);
  return at;
}

// What one collective posted on the context: its buffers and the owners of the
// memory they point into, kept for the process if it fails (Note [Buffers of a
// failed exchange]).
struct Posted {
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
  std::vector<std::shared_ptr<void>> owners;

  gloo::transport::UnboundBuffer& make(gloo::Context& context, void* p, size_t bytes) {
    buffers.push_back(context.createUnboundBuffer(p, bytes));
    return *buffers.back();
  }
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(Rendezvous& r, double timeout_s) : ProcessGroup(r), store_(r), watch_(r) {
    try {
      GlooMesh m = gloo_connect_mesh(
          r, store_, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
      device_ = std::move(m.device);
      context_ = std::move(m.context);
    } catch (const std::exception& e) {
      fail("connecting the ranks", e.what());
    }
  }
  const char* name() const override { return "gloo"; }

  void all_reduce(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) override {
    FANOUT_ASSERT(buf.device().is_cpu() && buf.dtype() == DType::f32, "gloo all-reduce of ",
                  buf.str());
    FANOUT_ASSERT(0 <= begin && end <= buf.numel(), "range [", begin, ", ", end, ") of ",
                  buf.str());
    if (end <= begin) return;
    const bool bf16 = sum_dtype_ == DType::bf16;
    stream.enqueue_blocking([this, buf, begin, end, bf16] {
      std::lock_guard<std::mutex> lock(grad_mu_);
      run("all-reduce", buf, [&](Posted& posted) {
        std::vector<int64_t> at = shard_bounds(end - begin, world());
        for (int64_t& a : at) a += begin;
        if (bf16) return all_reduce_bf16(posted, buf.data<float>(), at);
        ring_reduce_scatter(posted, buf.data<float>(), at, kGradTag);
        ring_all_gather(posted, reinterpret_cast<char*>(buf.data<float>() + begin), at,
                        sizeof(float), kGradGatherTag);
      });
    });
  }

  void set_sum_dtype(DType dtype) override {
    FANOUT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "sums travel in f32 or bf16, not ",
                 dtype_name(dtype));
    sum_dtype_ = dtype;
  }

  // The root sends to every other rank.
  void broadcast(const Tensor& buf, int root, Stream& stream) override {
    FANOUT_ASSERT(buf.device().is_cpu() && buf.dtype() == DType::f32, "gloo broadcast of ",
                  buf.str());
    FANOUT_ASSERT(0 <= root && root < world(), "broadcast from rank ", root, " of ", world());
    stream.enqueue_blocking([this, buf, root] {
      run("broadcast", buf, [&](Posted& posted) {
        if (world() == 1 || buf.nbytes() == 0) return;
        const auto deadline = Clock::now() + context_->getTimeout();
        auto& b = posted.make(*context_, buf.raw(), static_cast<size_t>(buf.nbytes()));
        if (rank() != root) {
          b.recv(root, slot_for(kBroadcastTag));
          return watch_.wait_recv(b, deadline);
        }
        for (int j = 0; j < world(); ++j)
          if (j != root) b.send(j, slot_for(kBroadcastTag));
        for (int j = 0; j < world(); ++j)
          if (j != root) watch_.wait_send(b, deadline);
      });
    });
  }

  void reduce_scatter(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                      int64_t end, Stream& stream) override {
    FANOUT_ASSERT(buf.device().is_cpu() && buf.dtype() == DType::f32, "gloo reduce-scatter of ",
                  buf.str());
    check_pieces(buf, bounds, begin, end);
    if (end <= begin) return;
    bool bf16 = sum_dtype_ == DType::bf16;
    stream.enqueue_blocking([this, buf, at = piece_edges(bounds, begin, end), bf16] {
      std::lock_guard<std::mutex> lock(grad_mu_);
      run("reduce-scatter", buf, [&](Posted& posted) {
        if (bf16)
          ring_reduce_scatter_bf16(posted, buf.data<float>(), at, kReduceScatterTag);
        else
          ring_reduce_scatter(posted, buf.data<float>(), at, kReduceScatterTag);
      });
    });
  }

  void all_gather(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin, int64_t end,
                  Stream& stream) override {
    FANOUT_ASSERT(
        buf.device().is_cpu() && (buf.dtype() == DType::f32 || buf.dtype() == DType::bf16),
        "gloo all-gather of ", buf.str());
    check_pieces(buf, bounds, begin, end);
    if (end <= begin) return;
    stream.enqueue_blocking([this, buf, at = piece_edges(bounds, begin, end)] {
      // Not grad_mu_: zero3 gathers weights on a fetch stream while the comm
      // stream sums gradients, and ranks may reach the two in either order. Each
      // kind is issued in one order on every rank and has its own slot, so they
      // run side by side; serialising them would deadlock two ranks that hold
      // one each.
      std::lock_guard<std::mutex> lock(gather_mu_);
      run("all-gather", buf, [&](Posted& posted) {
        const size_t elem = dtype_size(buf.dtype());
        ring_all_gather(posted, static_cast<char*>(buf.raw()) + at.front() * elem, at, elem,
                        kAllGatherTag);
      });
    });
  }

  // Every rank sends its values to every other and sums all of them in rank
  // order: the same bits on every rank.
  void all_reduce_host(double* values, int64_t n) override {
    FANOUT_ASSERT(n >= 0, "a host all-reduce of ", n, " values");
    if (world() == 1 || n == 0) return;
    run("all-reduce", Tensor(), [&](Posted& posted) {
      const auto deadline = Clock::now() + context_->getTimeout();
      const size_t bytes = static_cast<size_t>(n) * sizeof(double);
      auto mine = std::make_shared<std::vector<double>>(values, values + n);
      auto all = std::make_shared<std::vector<double>>(static_cast<size_t>(n) * world());
      posted.owners.push_back(mine);
      posted.owners.push_back(all);
      auto& out = posted.make(*context_, mine->data(), bytes);
      auto& in = posted.make(*context_, all->data(), all->size() * sizeof(double));
      for (int j = 0; j < world(); ++j) {
        if (j == rank()) continue;
        out.send(j, slot_for(kScalarTag));
        in.recv(j, slot_for(kScalarTag), j * bytes, bytes);
      }
      for (int j = 0; j + 1 < world(); ++j) watch_.wait_recv(in, deadline);
      for (int j = 0; j + 1 < world(); ++j) watch_.wait_send(out, deadline);
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int j = 0; j < world(); ++j) sum += j == rank() ? (*mine)[i] : (*all)[j * n + i];
        values[i] = sum;
      }
    });
  }

 private:
  // bf16 on the wire, as DDP's bf16_compress_hook over NCCL: a bf16
  // reduce-scatter (each hop rounds its contribution and the partial sum), every
  // owner's sum rounded once, and a bf16 all-gather: half of fp32's bytes, and
  // the same bits on every rank.
  void all_reduce_bf16(Posted& posted, float* p, const std::vector<int64_t>& at) {
    ring_reduce_scatter_bf16(posted, p, at, kGradTag);
    const int64_t begin = at.front(), n = at.back() - begin;
    if (!gathered_ || gathered_->size() < static_cast<size_t>(n))
      gathered_ = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
    posted.owners.push_back(gathered_);
    uint16_t* g = gathered_->data();
    for (int64_t i = at[rank()]; i < at[rank() + 1]; ++i) g[i - begin] = float_to_bf16(p[i]);
    ring_all_gather(posted, reinterpret_cast<char*>(g), at, sizeof(uint16_t), kGradGatherTag);
    for (int64_t i = 0; i < n; ++i) p[begin + i] = bf16_to_float(g[i]);
  }

  void check_pieces(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                    int64_t end) const {
    FANOUT_ASSERT(static_cast<int>(bounds.size()) == world() + 1, bounds.size(),
                  " piece bounds for ", world(), " ranks");
    FANOUT_ASSERT(std::is_sorted(bounds.begin(), bounds.end()), "piece bounds must not decrease");
    FANOUT_ASSERT(0 <= begin && end <= buf.numel(), "range [", begin, ", ", end, ") of ",
                  buf.str());
  }

  // The ring's neighbours, and piece k mod W.
  int right() const { return (rank() + 1) % world(); }
  int left_rank() const { return (rank() + world() - 1) % world(); }
  int piece(int64_t k) const { return static_cast<int>(((k % world()) + world()) % world()); }
  // Elements of the largest piece (what a rank receives at most per ring step).
  int64_t largest_piece(const std::vector<int64_t>& at) const {
    int64_t largest = 0;
    for (int q = 0; q < world(); ++q) largest = std::max(largest, at[q + 1] - at[q]);
    return largest;
  }

  // One step of a ring: post the send and the receive (either may be empty), wait for both.
  void ring_step(gloo::transport::UnboundBuffer& from, size_t from_at, size_t send_bytes,
                 gloo::transport::UnboundBuffer& into, size_t into_at, size_t recv_bytes,
                 uint64_t slot) {
    if (send_bytes > 0) from.send(right(), slot, from_at, send_bytes);
    if (recv_bytes > 0) into.recv(left_rank(), slot, into_at, recv_bytes);
    if (recv_bytes > 0) watch_.wait_recv(into, Clock::now() + context_->getTimeout());
    if (send_bytes > 0) watch_.wait_send(from, Clock::now() + context_->getTimeout());
  }

  // f32 sums (Note [Gloo rings over uneven pieces]): the partial sums travel in
  // `p` itself; each step's arrival lands in stage_ and is added into p. bytes_sent_
  // counts the pieces sent: the range less this rank's own piece, 4 bytes an element.
  void ring_reduce_scatter(Posted& posted, float* p, const std::vector<int64_t>& at, uint32_t tag) {
    const int64_t base = at.front(), largest = largest_piece(at);
    if (world() == 1 || largest == 0) return;
    if (!stage_ || stage_->size() < static_cast<size_t>(largest))
      stage_ = std::make_shared<std::vector<float>>(static_cast<size_t>(largest));
    posted.owners.push_back(stage_);
    float* stage = stage_->data();
    auto& data = posted.make(*context_, p + base, (at.back() - base) * sizeof(float));
    auto& inbox = posted.make(*context_, stage, largest * sizeof(float));
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s - 1), b = piece(rank() - s - 2);
      size_t send = (at[a + 1] - at[a]) * sizeof(float), recv = (at[b + 1] - at[b]) * sizeof(float);
      ring_step(data, (at[a] - base) * sizeof(float), send, inbox, 0, recv, slot_for(tag));
      bytes_sent_ += static_cast<int64_t>(send);
      for (int64_t i = 0; i < at[b + 1] - at[b]; ++i) p[at[b] + i] += stage[i];
    }
  }

  // bf16 sums: two piece-sized bf16 buffers in wire_ take turns as the outgoing
  // partial sum and the inbox. A hop adds its rounded contribution to the arrival
  // in fp32 and rounds; the owner adds the arrival to its own values in fp32.
  // bytes_sent_ counts the pieces sent: the range less this rank's own piece, 2 bytes an element.
  void ring_reduce_scatter_bf16(Posted& posted, float* p, const std::vector<int64_t>& at,
                                uint32_t tag) {
    const int64_t largest = largest_piece(at);
    if (world() == 1 || largest == 0) return;
    if (!wire_ || wire_->size() < 2 * static_cast<size_t>(largest))
      wire_ = std::make_shared<std::vector<uint16_t>>(2 * static_cast<size_t>(largest));
    posted.owners.push_back(wire_);
    uint16_t* out = wire_->data();
    uint16_t* in = wire_->data() + largest;
    gloo::transport::UnboundBuffer* out_buf =
        &posted.make(*context_, out, largest * sizeof(uint16_t));
    gloo::transport::UnboundBuffer* in_buf =
        &posted.make(*context_, in, largest * sizeof(uint16_t));
    int first = piece(rank() - 1);
    for (int64_t i = 0; i < at[first + 1] - at[first]; ++i)
      out[i] = float_to_bf16(p[at[first] + i]);
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s - 1), b = piece(rank() - s - 2);
      size_t send = (at[a + 1] - at[a]) * sizeof(uint16_t);
      size_t recv = (at[b + 1] - at[b]) * sizeof(uint16_t);
      ring_step(*out_buf, 0, send, *in_buf, 0, recv, slot_for(tag));
      bytes_sent_ += static_cast<int64_t>(send);
      float* mine = p + at[b];
      int64_t n = at[b + 1] - at[b];
      if (b == rank()) {  // the last step: this rank's piece
        for (int64_t i = 0; i < n; ++i) mine[i] += bf16_to_float(in[i]);
        break;
      }
      for (int64_t i = 0; i < n; ++i)
        in[i] = float_to_bf16(bf16_to_float(in[i]) + bf16_to_float(float_to_bf16(mine[i])));
      std::swap(out, in);
      std::swap(out_buf, in_buf);
    }
  }

  // In place: `base` holds the range's elements from at.front() on, `elem` bytes
  // each (f32 or bf16, moved as bytes). bytes_sent_ counts the pieces sent: the
  // range less rank r+1's piece.
  void ring_all_gather(Posted& posted, char* base, const std::vector<int64_t>& at, size_t elem,
                       uint32_t tag) {
    if (world() == 1 || at.back() == at.front()) return;
    size_t bytes = (at.back() - at.front()) * elem;
    // Two handles on the same bytes: one pending operation per unbound buffer.
    auto& from = posted.make(*context_, base, bytes);
    auto& into = posted.make(*context_, base, bytes);
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s), b = piece(rank() - s - 1);
      size_t send = (at[a + 1] - at[a]) * elem, recv = (at[b + 1] - at[b]) * elem;
      ring_step(from, (at[a] - at.front()) * elem, send, into, (at[b] - at.front()) * elem, recv,
                slot_for(tag));
      bytes_sent_ += static_cast<int64_t>(send);
    }
  }

  // Runs one collective; when it fails, keeps what it posted (and `memory`, the
  // caller's tensor its buffers may point into) for the process, and throws one
  // line naming what the rendezvous knows.
  template <typename F>
  void run(const char* what, const Tensor& memory, F&& f) {
    Posted posted;
    try {
      f(posted);
    } catch (const std::exception& e) {
      if (memory.defined()) posted.owners.push_back(std::make_shared<Tensor>(memory));
      posted.owners.push_back(context_);
      posted.owners.push_back(device_);
      keep_for_process(std::make_shared<Posted>(std::move(posted)));
      fail(what, e.what());
    }
  }

  [[noreturn]] void fail(const char* what, const std::string& cause) {
    detail::throw_error(detail::str_cat("rank ", rank(), ": ", what,
                                        " failed: ", rendezvous_.describe_failure(),
                                        " (gloo: ", watch_.cause(cause), ")"));
  }

  GlooRendezvousStore store_;
  GlooWatch watch_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::mutex grad_mu_;    // gradient sums: all-reduce, reduce-scatter
  std::mutex gather_mu_;  // all-gathers (they use no staging buffer)
  DType sum_dtype_ = DType::f32;
  // Staging for the sums, under grad_mu_; shared with a failed collective's Posted.
  std::shared_ptr<std::vector<float>> stage_;        // f32 reduce-scatter arrivals
  std::shared_ptr<std::vector<uint16_t>> wire_;      // bf16 partial sums
  std::shared_ptr<std::vector<uint16_t>> gathered_;  // bf16 all-reduce results
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_group(Rendezvous& rendezvous, double timeout_s) {
  return std::make_unique<GlooGroup>(rendezvous, timeout_s);
}

}  // namespace fanout::distributed
