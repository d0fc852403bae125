// LocalCollectives: each collective runs on the stream of the rank that receives
// the data, after waiting (through events) for every input stream, and each input
// stream then waits for it — so buffers are neither read early nor overwritten
// while another rank still reads them. Sums go through a staging buffer on the
// receiving device (copy, then add), as they would between distinct GPUs.

#include <map>
#include <mutex>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/collectives/collectives.h"

namespace fanout::parallel {

namespace {

class LocalCollectives final : public Collectives {
 public:
  const char* name() const override { return "local"; }

  void broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
                 int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto ready = record_all(streams);
    for (size_t r = 0; r < bufs.size(); ++r) {
      if (static_cast<int>(r) == root) continue;
      ready[root]->wait(*streams[r]);
      StreamSpan span(*streams[r], "broadcast");
      copy(*streams[r], range(bufs[r], begin, end), range(bufs[root], begin, end));
    }
    // The root's buffer must not change before every rank copied it.
    for (size_t r = 0; r < bufs.size(); ++r) {
      if (static_cast<int>(r) == root) continue;
      Event done;
      done.record(*streams[r]);
      done.wait(*streams[root]);
    }
  }

  void reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams, int root,
              int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto ready = record_all(streams);
    sum_into(bufs, streams, ready, root, begin, end);
    release_inputs(streams, root);
  }

  void all_reduce(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  int64_t begin, int64_t end) override {
    reduce(bufs, streams, 0, begin, end);
    broadcast(bufs, streams, 0, begin, end);
  }

  void reduce_scatter(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                      const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto ready = record_all(streams);
    for (size_t r = 0; r < bufs.size(); ++r) {
      int64_t lo = std::max(begin, bounds[r]), hi = std::min(end, bounds[r + 1]);
      if (lo < hi) sum_into(bufs, streams, ready, static_cast<int>(r), lo, hi);
    }
    // Inputs stay untouched until every receiver has read them.
    for (size_t r = 0; r < bufs.size(); ++r) release_inputs(streams, static_cast<int>(r));
  }

  void all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                  const std::vector<int64_t>& bounds, int64_t begin, int64_t end) override {
    if (end <= begin) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto ready = record_all(streams);
    for (size_t r = 0; r < bufs.size(); ++r) {
      for (size_t q = 0; q < bufs.size(); ++q) {
        int64_t lo = std::max(begin, bounds[q]), hi = std::min(end, bounds[q + 1]);
        if (q == r || lo >= hi) continue;
        ready[q]->wait(*streams[r]);
        StreamSpan span(*streams[r], "all-gather");
        copy(*streams[r], range(bufs[r], lo, hi), range(bufs[q], lo, hi));
      }
    }
    for (size_t r = 0; r < bufs.size(); ++r) release_inputs(streams, static_cast<int>(r));
  }

 private:
  // Destroying an Event after queuing waits on it is safe (CPU waits share its
  // state; CUDA defers the release), so events live only for the call.
  using Events = std::vector<std::shared_ptr<Event>>;

  static Tensor range(const Tensor& t, int64_t begin, int64_t end) {
    return t.view(begin, {end - begin});
  }

  static Events record_all(const std::vector<Stream*>& streams) {
    Events ready;
    for (Stream* s : streams) {
      ready.push_back(std::make_shared<Event>());
      ready.back()->record(*s);
    }
    return ready;
  }

  // A copy, counted in bytes_moved() when it crosses devices.
  void copy(Stream& s, const Tensor& dst, const Tensor& src) {
    tensor_copy(s, dst, src);
    if (dst.device() != src.device()) bytes_moved_ += static_cast<int64_t>(src.nbytes());
  }

  // bufs[root][lo, hi) += every other rank's [lo, hi), on the root's stream. With
  // bf16 sums each sender first rounds its range into its own send buffer (on its
  // own stream); the root adds the bf16 values in fp32. Replicas sharing the
  // root's device are rounded too, so the sum does not depend on the placement.
  void sum_into(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                const Events& ready, int root, int64_t lo, int64_t hi) {
    Stream& s = *streams[root];
    Tensor dst = range(bufs[root], lo, hi);
    bool bf16 = sum_dtype_ == DType::bf16;
    std::vector<Tensor> send(bufs.size());
    for (size_t r = 0; r < bufs.size(); ++r) {
      if (static_cast<int>(r) == root) continue;
      if (!bf16) {
        ready[r]->wait(s);
        continue;
      }
      ready[r]->wait(*streams[r]);
      send[r] = buffer(send_, *streams[r], hi - lo, DType::bf16);
      {
        StreamSpan span(*streams[r], "round bf16");
        flat_round_bf16(*streams[r], send[r], range(bufs[r], lo, hi));
      }
      Event rounded;
      rounded.record(*streams[r]);
      rounded.wait(s);
    }
    StreamSpan span(s, "reduce");
    for (size_t r = 0; r < bufs.size(); ++r) {
      if (static_cast<int>(r) == root) continue;
      Tensor src = bf16 ? send[r] : range(bufs[r], lo, hi);
      if (src.device() == dst.device()) {
        flat_add(s, dst, src);  // replicas sharing one device: no transfer needed
        continue;
      }
      Tensor stage = buffer(staging_, s, hi - lo, src.dtype());
      copy(s, stage, src);
      flat_add(s, dst, stage);
    }
    // A sender's next rounding (the next shard) must wait until the root read this one.
    if (bf16) release_inputs(streams, root);
  }

  // Every other stream waits until `root`'s stream has finished reading from it.
  static void release_inputs(const std::vector<Stream*>& streams, int root) {
    Event done;
    done.record(*streams[root]);
    for (size_t r = 0; r < streams.size(); ++r)
      if (static_cast<int>(r) != root) done.wait(*streams[r]);
  }

  // One growing buffer per stream and dtype (tagged comm in its device's
  // allocator): staging on the receiving stream, send buffers on the sending one;
  // the stream's order makes reuse safe. Replacing a buffer drops the old one
  // only after the stream finished with it.
  using Buffers = std::map<std::pair<Stream*, DType>, Tensor>;
  static Tensor buffer(Buffers& buffers, Stream& s, int64_t numel, DType dtype) {
    Tensor& t = buffers[{&s, dtype}];
    if (!t.defined() || t.numel() < numel) {
      s.synchronize();
      t = Tensor::empty({numel}, dtype, s.device(), MemTag::comm);
    }
    return t.view(0, {numel});
  }

  std::mutex mu_;
  Buffers staging_, send_;
};

}  // namespace

std::unique_ptr<Collectives> make_local_collectives() {
  return std::make_unique<LocalCollectives>();
}

}  // namespace fanout::parallel
