// GlooGroup: ProcessGroup over Gloo's TCP transport. The Rendezvous serves as
// Gloo's key-value store for connectFullMesh. Gradient all-reduces run on the
// caller's (CPU) stream as blocking host work, outside the device's compute
// arena, so backward keeps computing while buckets travel. ZeRO's reduce-scatter
// and all-gather are rings of their own on the context's pairs (Note [Gloo rings
// over uneven pieces]).

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "engine/core/check.h"
#include "engine/distributed/gloo_mesh.h"
#include "engine/distributed/process_group.h"

namespace fanout::distributed {

namespace {

// Separate tags keep gradient buckets (comm stream) and host scalars (host
// thread) from pairing with each other if they ever overlap.
constexpr uint32_t kGradTag = 1, kScalarTag = 2, kBroadcastTag = 3, kReduceScatterTag = 4,
                   kAllGatherTag = 5;
// Our rings' slots: a prefix none of gloo's own collectives uses (gloo/types.h).
constexpr uint8_t kRingSlotPrefix = 0x40;

// Note [Gloo rings over uneven pieces]
// gloo's reduce-scatter (halving-doubling) takes neither bf16 hops nor our
// pieces, so both collectives are rings on the context's pairs: W-1 steps, at
// each of which every rank sends one piece to rank r+1 and receives one from
// rank r-1. Reduce-scatter: at step s rank r sends piece r-s-1 (its own values
// at s = 0, else the partial sum it just received plus its own) and receives
// piece r-s-2, so the last step brings it the sum of piece r over the others.
// All-gather: rank r sends piece r-s and receives piece r-s-1 (in place). An
// empty piece is skipped by its sender and its receiver alike, so every send
// meets its receive. A rank sends every piece but one: reduce-scatter all but
// its own, all-gather all but rank r+1's -- (W-1)/W of an evenly cut range.

// Piece q of [begin, end) is [at[q], at[q+1]): the bounds clamped to the range
// (the same pieces as [max(begin, bounds[q]), min(end, bounds[q+1]))).
std::vector<int64_t> piece_edges(const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  std::vector<int64_t> at(bounds.size());
  for (size_t q = 0; q < bounds.size(); ++q) at[q] = std::clamp(bounds[q], begin, end);
  return at;
}

// One step of a ring: post the send and the receive (either may be empty), wait for both.
void ring_step(gloo::transport::UnboundBuffer& from, size_t from_at, size_t send_bytes,
               gloo::transport::UnboundBuffer& into, size_t into_at, size_t recv_bytes, int right,
               int left, uint64_t slot, std::chrono::milliseconds timeout) {
  if (send_bytes > 0) from.send(right, slot, from_at, send_bytes);
  if (recv_bytes > 0) into.recv(left, slot, into_at, recv_bytes);
  if (recv_bytes > 0 && !into.waitRecv(timeout)) throw std::runtime_error("receive aborted");
  if (send_bytes > 0 && !from.waitSend(timeout)) throw std::runtime_error("send aborted");
}

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(Rendezvous& r, double timeout_s) : ProcessGroup(r), store_(r) {
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
    if (end <= begin) return;
    if (sum_dtype_ == DType::bf16) return all_reduce_bf16(buf, begin, end, stream);
    stream.enqueue_blocking([this, buf, begin, end] {
      std::lock_guard<std::mutex> lock(grad_mu_);
      float* p = buf.data<float>() + begin;
      int64_t w = world();
      bytes_sent_ += 2 * (w - 1) * (end - begin) * static_cast<int64_t>(sizeof(float)) / w;
      run("all-reduce", [&] {
        gloo::AllreduceOptions o(context_);
        o.setOutput(p, static_cast<size_t>(end - begin));
        o.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        o.setTag(kGradTag);
        gloo::allreduce(o);
      });
    });
  }

  void set_sum_dtype(DType dtype) override {
    FANOUT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "sums travel in f32 or bf16, not ",
                 dtype_name(dtype));
    sum_dtype_ = dtype;
  }

  void broadcast(const Tensor& buf, int root, Stream& stream) override {
    FANOUT_ASSERT(buf.device().is_cpu() && buf.dtype() == DType::f32, "gloo broadcast of ",
                  buf.str());
    stream.enqueue_blocking([this, buf, root] {
      run("broadcast", [&] {
        gloo::BroadcastOptions o(context_);
        o.setOutput(buf.data<float>(), static_cast<size_t>(buf.numel()));
        o.setRoot(root);
        o.setTag(kBroadcastTag);
        gloo::broadcast(o);
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
      run("reduce-scatter", [&] {
        if (bf16)
          ring_reduce_scatter_bf16(buf.data<float>(), at);
        else
          ring_reduce_scatter(buf.data<float>(), at);
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
      // kind is issued in one order on every rank and has its own tag, so they
      // run side by side; serialising them would deadlock two ranks that hold
      // one each.
      std::lock_guard<std::mutex> lock(gather_mu_);
      run("all-gather", [&] { ring_all_gather(buf, at); });
    });
  }

  void all_reduce_host(double* values, int64_t n) override {
    run("all-reduce", [&] {
      gloo::AllreduceOptions o(context_);
      o.setOutput(values, static_cast<size_t>(n));
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
      o.setTag(kScalarTag);
      gloo::allreduce(o);
    });
  }

 private:
  // bf16 on the wire, as DDP's bf16_compress_hook over NCCL: every rank rounds its
  // range to bf16, and a ring all-reduce runs on the bf16 elements, each pairwise
  // sum taken in fp32 and rounded back to bf16 for the next hop. A ring sends
  // 2 (W-1)/W of the buffer per rank, so exactly half of fp32's bytes for any W;
  // the result is copied around the ring, so every rank holds the same bits.
  static void bf16_sum(void* c, const void* a, const void* b, size_t n) {
    auto* out = static_cast<uint16_t*>(c);
    const auto* x = static_cast<const uint16_t*>(a);
    const auto* y = static_cast<const uint16_t*>(b);
    for (size_t i = 0; i < n; ++i)
      out[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
  }

  void all_reduce_bf16(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) {
    stream.enqueue_blocking([this, buf, begin, end] {
      std::lock_guard<std::mutex> lock(grad_mu_);
      size_t n = static_cast<size_t>(end - begin);
      int64_t w = world();
      float* p = buf.data<float>() + begin;
      wire_.resize(n);
      for (size_t i = 0; i < n; ++i) wire_[i] = float_to_bf16(p[i]);
      bytes_sent_ += 2 * (w - 1) * static_cast<int64_t>(n * sizeof(uint16_t)) / w;
      run("all-reduce", [&] {
        gloo::AllreduceOptions o(context_);
        o.setOutput(wire_.data(), n);
        o.setReduceFunction(&GlooGroup::bf16_sum);
        o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        o.setTag(kGradTag);
        gloo::allreduce(o);
      });
      for (size_t i = 0; i < n; ++i) p[i] = bf16_to_float(wire_[i]);
    });
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
  int left() const { return (rank() + world() - 1) % world(); }
  int piece(int64_t k) const { return static_cast<int>(((k % world()) + world()) % world()); }
  // Elements of the largest piece (what a rank receives at most per ring step).
  int64_t largest_piece(const std::vector<int64_t>& at) const {
    int64_t largest = 0;
    for (int q = 0; q < world(); ++q) largest = std::max(largest, at[q + 1] - at[q]);
    return largest;
  }

  // f32 sums (Note [Gloo rings over uneven pieces]): the partial sums travel in
  // `buf` itself; each step's arrival lands in stage_ and is added into buf. bytes_sent_
  // counts the pieces sent: the range less this rank's own piece, 4 bytes an element.
  void ring_reduce_scatter(float* p, const std::vector<int64_t>& at) {
    const int64_t base = at.front(), largest = largest_piece(at);
    if (world() == 1 || largest == 0) return;
    stage_.resize(static_cast<size_t>(largest));
    auto data = context_->createUnboundBuffer(p + base, (at.back() - base) * sizeof(float));
    auto inbox = context_->createUnboundBuffer(stage_.data(), stage_.size() * sizeof(float));
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, kReduceScatterTag);
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s - 1), b = piece(rank() - s - 2);
      size_t send = (at[a + 1] - at[a]) * sizeof(float), recv = (at[b + 1] - at[b]) * sizeof(float);
      ring_step(*data, (at[a] - base) * sizeof(float), send, *inbox, 0, recv, right(), left(), slot,
                context_->getTimeout());
      bytes_sent_ += static_cast<int64_t>(send);
      for (int64_t i = 0; i < at[b + 1] - at[b]; ++i) p[at[b] + i] += stage_[i];
    }
  }

  // bf16 sums: two piece-sized bf16 buffers in wire_ take turns as the outgoing
  // partial sum and the inbox. A hop adds its rounded contribution to the arrival
  // in fp32 and rounds; the owner adds the arrival to its own values in fp32.
  // bytes_sent_ counts the pieces sent: the range less this rank's own piece, 2 bytes an element.
  void ring_reduce_scatter_bf16(float* p, const std::vector<int64_t>& at) {
    const int64_t largest = largest_piece(at);
    if (world() == 1 || largest == 0) return;
    wire_.resize(2 * static_cast<size_t>(largest));
    uint16_t* out = wire_.data();
    uint16_t* in = wire_.data() + largest;
    auto out_buf = context_->createUnboundBuffer(out, largest * sizeof(uint16_t));
    auto in_buf = context_->createUnboundBuffer(in, largest * sizeof(uint16_t));
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, kReduceScatterTag);
    int first = piece(rank() - 1);
    for (int64_t i = 0; i < at[first + 1] - at[first]; ++i)
      out[i] = float_to_bf16(p[at[first] + i]);
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s - 1), b = piece(rank() - s - 2);
      size_t send = (at[a + 1] - at[a]) * sizeof(uint16_t);
      size_t recv = (at[b + 1] - at[b]) * sizeof(uint16_t);
      ring_step(*out_buf, 0, send, *in_buf, 0, recv, right(), left(), slot, context_->getTimeout());
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

  // In place in `buf`, f32 or bf16 elements moved as bytes. bytes_sent_ counts the
  // pieces sent: the range less rank r+1's piece.
  void ring_all_gather(const Tensor& buf, const std::vector<int64_t>& at) {
    if (world() == 1 || at.back() == at.front()) return;
    size_t elem = dtype_size(buf.dtype());
    auto* base = static_cast<char*>(buf.raw()) + at.front() * elem;
    size_t bytes = (at.back() - at.front()) * elem;
    // Two handles on the same bytes: one pending operation per unbound buffer.
    auto from = context_->createUnboundBuffer(base, bytes);
    auto into = context_->createUnboundBuffer(base, bytes);
    uint64_t slot = gloo::Slot::build(kRingSlotPrefix, kAllGatherTag);
    for (int s = 0; s + 1 < world(); ++s) {
      int a = piece(rank() - s), b = piece(rank() - s - 1);
      size_t send = (at[a + 1] - at[a]) * elem, recv = (at[b + 1] - at[b]) * elem;
      ring_step(*from, (at[a] - at.front()) * elem, send, *into, (at[b] - at.front()) * elem, recv,
                right(), left(), slot, context_->getTimeout());
      bytes_sent_ += static_cast<int64_t>(send);
    }
  }

  template <typename F>
  void run(const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
  }

  [[noreturn]] void fail(const char* what, const std::string& cause) {
    detail::throw_error(detail::str_cat("rank ", rank(), ": ", what, " failed: ",
                                        rendezvous_.describe_failure(), " (gloo: ", cause, ")"));
  }

  GlooRendezvousStore store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::mutex grad_mu_;
  std::mutex gather_mu_;  // all-gathers (they use no staging buffer)
  DType sum_dtype_ = DType::f32;
  std::vector<uint16_t> wire_;  // bf16 sums, under grad_mu_
  std::vector<float> stage_;    // f32 reduce-scatter arrivals, under grad_mu_
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_group(Rendezvous& rendezvous, double timeout_s) {
  return std::make_unique<GlooGroup>(rendezvous, timeout_s);
}

}  // namespace fanout::distributed
