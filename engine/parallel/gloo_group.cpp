// GlooGroup: ProcessGroup over Gloo's TCP transport. The Rendezvous serves as
// Gloo's key-value store for connectFullMesh. Gradient all-reduces run on the
// caller's (CPU) stream as blocking host work, outside the device's compute
// arena, so backward keeps computing while buckets travel.

#include <chrono>
#include <mutex>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "engine/core/check.h"
#include "engine/parallel/process_group.h"

namespace fanout::parallel {

namespace {

class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(Rendezvous& r) : r_(r) {}
  void set(const std::string& key, const std::vector<char>& data) override { r_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return r_.get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) r_.get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  Rendezvous& r_;
};

// Separate tags keep gradient buckets (comm stream) and host scalars (host
// thread) from pairing with each other if they ever overlap.
constexpr uint32_t kGradTag = 1, kScalarTag = 2, kBroadcastTag = 3;

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(Rendezvous& r, double timeout_s) : ProcessGroup(r), store_(r) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    if (const char* addr = std::getenv("MASTER_ADDR")) {
      std::string a = addr;
      if (a != "localhost" && a != "127.0.0.1") attr.hostname = "";  // multi-node: own hostname
    }
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(r.rank(), r.world());
      context_->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
      context_->connectFullMesh(store_, device_);
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

  StoreAdapter store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::mutex grad_mu_;
  DType sum_dtype_ = DType::f32;
  std::vector<uint16_t> wire_;  // bf16 sums, under grad_mu_
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_group(Rendezvous& rendezvous, double timeout_s) {
  return std::make_unique<GlooGroup>(rendezvous, timeout_s);
}

}  // namespace fanout::parallel
