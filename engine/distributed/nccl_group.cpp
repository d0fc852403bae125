// NcclGroup: ProcessGroup over NCCL for one GPU per process (ddp on GPUs). Rank 0
// creates the unique id and publishes it through the rendezvous; the communicator
// is non-blocking (NcclComms, nccl_comm.h). Collectives are queued on the
// caller's CUDA stream from any thread (launches are serialised), and a watchdog
// aborts them when a rank dies or the timeout passes, so the engine's stream waits
// return and the next call throws, naming what the rendezvous knows (Note [NCCL
// deadlines] in nccl_comm.cpp). Sums under --grad-comm bf16 are GlooGroup's
// bf16 ring, step by step (Note [bf16 sums over NCCL] in nccl_collectives.cpp).
// Compiled in every CUDA build with NCCL; it runs only on machines with GPUs.

#include "engine/core/check.h"
#include "engine/distributed/process_group.h"

#ifdef FANOUT_HAS_NCCL
#include <algorithm>
#include <map>
#include <mutex>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/core/cuda_check.h"
#include "engine/core/cuda_guard.h"
#include "engine/core/flat.h"
#include "engine/distributed/nccl_comm.h"
#endif

namespace fanout::distributed {

#ifdef FANOUT_HAS_NCCL
namespace {

constexpr int64_t kHostScalars = 64;  // all_reduce_host's most values

// all_reduce_host's device side: a stream of its own and room for the values.
class HostScalars {
 public:
  explicit HostScalars(int device) : device_(device) {
    CudaDeviceGuard on(device);
    FANOUT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaError_t made = cudaMalloc(&values_, kHostScalars * sizeof(double));
    if (made != cudaSuccess) cudaStreamDestroy(stream_);
    FANOUT_CUDA_CHECK(made);
  }
  ~HostScalars() {
    try {
      CudaDeviceGuard on(device_);
      cudaFree(values_);
      cudaStreamDestroy(stream_);
    } catch (const std::exception&) {
      // The device is gone: nothing left to free.
    }
  }
  HostScalars(const HostScalars&) = delete;
  HostScalars& operator=(const HostScalars&) = delete;

  cudaStream_t stream() const { return stream_; }
  double* values() const { return values_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  double* values_ = nullptr;
};

cudaStream_t cuda_stream(Stream& s) {
  return static_cast<cudaStream_t>(s.cuda_handle());
}

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(Rendezvous& r, Device device, double timeout_s)
      : ProcessGroup(r), device_(device), host_(device.index) {
    comms_ = nccl_comms_for_rank(r, device.index, timeout_s, "nccl/unique-id");
  }
  const char* name() const override { return "nccl"; }
  void set_sum_dtype(DType dtype) override {
    FANOUT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "sums travel in f32 or bf16, not ",
                 dtype_name(dtype));
    sum_dtype_ = dtype;
  }

  void all_reduce(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) override {
    check_buffer(buf, "all-reduce", false);
    if (end <= begin) return;
    if (sum_dtype_ == DType::bf16) return all_reduce_bf16(buf, begin, end, stream);
    float* p = buf.data<float>() + begin;
    cudaStream_t s = cuda_stream(stream);
    size_t n = static_cast<size_t>(end - begin);
    comms_->launch("all-reduce", {s}, [&] {
      comms_->check(ncclAllReduce(p, p, n, ncclFloat, ncclSum, comms_->comm(0), s));
    });
    int64_t w = world();
    bytes_sent_ += 2 * (w - 1) * (end - begin) * static_cast<int64_t>(sizeof(float)) / w;
  }

  void broadcast(const Tensor& buf, int root, Stream& stream) override {
    check_buffer(buf, "broadcast", false);
    float* p = buf.data<float>();
    cudaStream_t s = cuda_stream(stream);
    size_t n = static_cast<size_t>(buf.numel());
    comms_->launch("broadcast", {s}, [&] {
      comms_->check(ncclBroadcast(p, p, n, ncclFloat, root, comms_->comm(0), s));
    });
  }

  // Equal pieces covering the range go to ncclReduceScatter in place; otherwise
  // one ncclReduce per non-empty piece, rooted at its owner, in one group; bf16
  // sums take the ring of ring_bf16. bytes_sent_ counts what a ring sends: every
  // piece but this rank's own.
  void reduce_scatter(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin,
                      int64_t end, Stream& stream) override {
    check_buffer(buf, "reduce-scatter", false);
    std::vector<int64_t> at = piece_edges(buf, bounds, begin, end);
    if (at.front() == at.back()) return;
    if (sum_dtype_ == DType::bf16) {
      std::lock_guard<std::mutex> lock(wire_mu_);
      Tensor wire = round_range(buf, at.front(), at.back(), stream);
      return ring_bf16(buf, wire, at, stream, false);
    }
    float* p = buf.data<float>();
    cudaStream_t s = cuda_stream(stream);
    comms_->launch("reduce-scatter", {s}, [&] {
      ncclComm_t c = comms_->comm(0);
      if (even(at)) {
        size_t n = static_cast<size_t>(at[1] - at[0]);
        comms_->check(ncclReduceScatter(p + at[0], p + at[rank()], n, ncclFloat, ncclSum, c, s));
        return;
      }
      for (int q = 0; q < world(); ++q) {
        if (at[q] == at[q + 1]) continue;
        size_t n = static_cast<size_t>(at[q + 1] - at[q]);
        comms_->check(ncclReduce(p + at[q], p + at[q], n, ncclFloat, ncclSum, q, c, s));
      }
    });
    bytes_sent_ += (at.back() - at.front() - (at[rank() + 1] - at[rank()])) *
                   static_cast<int64_t>(sizeof(float));
  }

  // Equal pieces covering the range go to ncclAllGather in place; otherwise one
  // ncclBroadcast per non-empty piece from its owner, in one group. bytes_sent_
  // counts what a ring in rank order sends: every piece but rank r+1's (NCCL's
  // ring order may differ; the sum over ranks is the same).
  void all_gather(const Tensor& buf, const std::vector<int64_t>& bounds, int64_t begin, int64_t end,
                  Stream& stream) override {
    check_buffer(buf, "all-gather", true);
    std::vector<int64_t> at = piece_edges(buf, bounds, begin, end);
    if (at.front() == at.back()) return;
    ncclDataType_t type = buf.dtype() == DType::bf16 ? ncclBfloat16 : ncclFloat;
    size_t elem = dtype_size(buf.dtype());
    auto* p = static_cast<char*>(buf.raw());
    cudaStream_t s = cuda_stream(stream);
    comms_->launch("all-gather", {s}, [&] {
      ncclComm_t c = comms_->comm(0);
      if (even(at)) {
        size_t n = static_cast<size_t>(at[1] - at[0]);
        comms_->check(ncclAllGather(p + at[rank()] * elem, p + at[0] * elem, n, type, c, s));
        return;
      }
      for (int q = 0; q < world(); ++q) {
        if (at[q] == at[q + 1]) continue;
        char* piece = p + at[q] * elem;
        size_t n = static_cast<size_t>(at[q + 1] - at[q]);
        comms_->check(ncclBroadcast(piece, piece, n, type, q, c, s));
      }
    });
    int next = (rank() + 1) % world();
    bytes_sent_ +=
        (at.back() - at.front() - (at[next + 1] - at[next])) * static_cast<int64_t>(elem);
  }

  // The host waits here, so this is where a failure queued on any stream surfaces
  // at the latest: every training step ends with one of these.
  void all_reduce_host(double* values, int64_t n) override {
    FANOUT_ASSERT(0 <= n && n <= kHostScalars, "too many host scalars: ", n);
    if (n == 0) return;
    cudaStream_t s = host_.stream();
    double* d = host_.values();
    size_t bytes = static_cast<size_t>(n) * sizeof(double);
    {
      CudaDeviceGuard on(device_.index);
      FANOUT_CUDA_CHECK(cudaMemcpyAsync(d, values, bytes, cudaMemcpyHostToDevice, s));
    }
    comms_->launch("host all-reduce", {s}, [&] {
      comms_->check(
          ncclAllReduce(d, d, static_cast<size_t>(n), ncclDouble, ncclSum, comms_->comm(0), s));
    });
    comms_->wait(0, s, "host all-reduce");
    CudaDeviceGuard on(device_.index);
    FANOUT_CUDA_CHECK(cudaMemcpyAsync(values, d, bytes, cudaMemcpyDeviceToHost, s));
    FANOUT_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  // Note [bf16 sums over NCCL] (nccl_collectives.cpp): every rank rounds the range,
  // ring_bf16 leaves piece r's bf16 sum (this rank's piece rounded too) in the
  // wire, an all-gather of the bf16 pieces brings the others', and every rank
  // widens the same bits. One rank rounds and widens, as Gloo's path does.
  void all_reduce_bf16(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) {
    std::lock_guard<std::mutex> lock(wire_mu_);
    const int64_t n = end - begin;
    Tensor wire = round_range(buf, begin, end, stream);
    if (world() > 1) {
      std::vector<int64_t> at(world() + 1);
      for (int q = 0; q <= world(); ++q) at[q] = begin + n * q / world();
      ring_bf16(buf, wire, at, stream, true);
      std::vector<int64_t> pieces(at.size());
      for (size_t q = 0; q < at.size(); ++q) pieces[q] = at[q] - begin;
      all_gather(wire, pieces, 0, n, stream);
    }
    flat_widen_bf16(stream, buf.view(begin, {n}), wire);
  }

  // wire (bf16, the range's length) <- buf[begin, end) rounded, on `stream`.
  Tensor round_range(const Tensor& buf, int64_t begin, int64_t end, Stream& stream) {
    Tensor wire = wire_buffer(stream, 0, end - begin);
    flat_round_bf16(stream, wire, buf.view(begin, {end - begin}));
    return wire;
  }

  // GlooGroup::ring_reduce_scatter_bf16 (Note [Gloo rings over uneven pieces] in
  // gloo_group.cpp) over NCCL: W-1 steps; at step s this rank sends piece r-s-1 to
  // rank r+1 (its own rounded values at s = 0, else the partial sum that just
  // arrived) and receives piece r-s-2 from rank r-1, then adds its rounded piece
  // to the arrival in fp32 and rounds (flat_add_round_bf16). At the last step the
  // arrival is piece r: owner_rounds ? wire's piece r <- round(arrival + it) (the
  // all-reduce's bf16 sum) : buf's piece r += arrival (fp32, the reduce-scatter).
  // `wire` holds the range [at.front(), at.back()) rounded; two piece-sized bf16
  // buffers take turns as the outgoing sum and the inbox.
  void ring_bf16(const Tensor& buf, const Tensor& wire, const std::vector<int64_t>& at,
                 Stream& stream, bool owner_rounds) {
    const int W = world(), r = rank();
    if (W == 1) return;
    const int64_t base = at.front();
    int64_t largest = 0;
    for (int q = 0; q < W; ++q) largest = std::max(largest, at[q + 1] - at[q]);
    if (largest == 0) return;
    Tensor turns[2] = {wire_buffer(stream, 1, largest), wire_buffer(stream, 2, largest)};
    auto piece = [W](int64_t k) { return static_cast<int>(((k % W) + W) % W); };
    cudaStream_t s = cuda_stream(stream);
    const size_t elem = sizeof(uint16_t);
    for (int step = 0; step + 1 < W; ++step) {
      const int a = piece(r - step - 1), b = piece(r - step - 2);
      const int64_t na = at[a + 1] - at[a], nb = at[b + 1] - at[b];
      const Tensor& in = turns[step % 2];
      const char* out = step == 0 ? static_cast<const char*>(wire.raw()) + (at[a] - base) * elem
                                  : static_cast<const char*>(turns[(step + 1) % 2].raw());
      if (na > 0 || nb > 0) {
        comms_->launch("reduce-scatter", {s}, [&] {
          ncclComm_t c = comms_->comm(0);
          if (na > 0)
            comms_->check(ncclSend(out, static_cast<size_t>(na), ncclBfloat16, (r + 1) % W, c, s));
          if (nb > 0)
            comms_->check(
                ncclRecv(in.raw(), static_cast<size_t>(nb), ncclBfloat16, (r + W - 1) % W, c, s));
        });
      }
      bytes_sent_ += na * static_cast<int64_t>(elem);
      if (nb == 0) {
        if (b == r) break;
        continue;
      }
      Tensor arrived = in.view(0, {nb}), mine = wire.view(at[b] - base, {nb});
      if (b == r) {
        if (owner_rounds)
          flat_add_round_bf16(stream, mine, arrived);
        else
          flat_add(stream, buf.view(at[b], {nb}), arrived);
        break;
      }
      flat_add_round_bf16(stream, arrived, mine);
    }
  }

  // One growing bf16 buffer per stream and slot (tagged comm); the stream's order
  // makes reuse safe, and a buffer is replaced only after its stream finished with
  // it. Under wire_mu_.
  Tensor wire_buffer(Stream& stream, int slot, int64_t numel) {
    Tensor& t = wires_[{&stream, slot}];
    if (!t.defined() || t.numel() < numel) {
      stream.synchronize();
      t = Tensor::empty({numel}, DType::bf16, device_, MemTag::comm);
    }
    return t.view(0, {numel});
  }

  void check_buffer(const Tensor& buf, const char* what, bool bf16_too) const {
    FANOUT_ASSERT(buf.device() == device_ &&
                      (buf.dtype() == DType::f32 || (bf16_too && buf.dtype() == DType::bf16)),
                  "NCCL ", what, " of ", buf.str(), " on rank ", rank(), " (", device_.str(), ")");
  }
  // Piece q of [begin, end) is [at[q], at[q+1]) (process_group.h): the bounds
  // clamped to the range.
  std::vector<int64_t> piece_edges(const Tensor& buf, const std::vector<int64_t>& bounds,
                                   int64_t begin, int64_t end) const {
    FANOUT_ASSERT(static_cast<int>(bounds.size()) == world() + 1, bounds.size(),
                  " piece bounds for ", world(), " ranks");
    FANOUT_ASSERT(std::is_sorted(bounds.begin(), bounds.end()), "piece bounds must not decrease");
    FANOUT_ASSERT(0 <= begin && end <= buf.numel(), "range [", begin, ", ", end, ") of ",
                  buf.str());
    std::vector<int64_t> at(bounds.size(), begin);
    if (end <= begin) return at;  // an empty range: empty pieces
    for (size_t q = 0; q < bounds.size(); ++q) at[q] = std::clamp(bounds[q], begin, end);
    return at;
  }
  // Every piece has the same (non-zero) size.
  bool even(const std::vector<int64_t>& at) const {
    for (int q = 1; q < world(); ++q)
      if (at[q + 1] - at[q] != at[1] - at[0]) return false;
    return at[1] > at[0];
  }

  Device device_;
  DType sum_dtype_ = DType::f32;
  std::mutex wire_mu_;  // wires_, and the bf16 sums that use them
  std::map<std::pair<Stream*, int>, Tensor> wires_;
  HostScalars host_;
  std::unique_ptr<NcclComms> comms_;  // finalized before host_'s memory is freed
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous& rendezvous, Device device,
                                              double timeout_s) {
  FANOUT_CHECK(device.is_cuda() && !device.is_bare(),
               "NCCL process groups need a CUDA device, got ", device.str());
  FANOUT_CHECK(timeout_s > 0, "the NCCL timeout must be positive, got ", timeout_s, " s");
  return std::make_unique<NcclGroup>(rendezvous, device, timeout_s);
}

#else

std::unique_ptr<ProcessGroup> make_nccl_group(Rendezvous&, Device device, double) {
  detail::throw_error(
      detail::str_cat("ddp on ", device.str(), " needs NCCL, and this build has none"));
}

#endif

}  // namespace fanout::distributed
