// GlooCommunicator: the members are processes with CPU devices, joined by a Gloo
// context of their own (its keys under "<name>/" in the rendezvous, apart from the
// ProcessGroup's). An exchange posts one send and one receive per peer on Gloo's
// unbound buffers, under a slot numbered by the exchange, and waits for them
// within the timeout, or until the GlooWatch sees a rank die; a peer that died or
// never came makes it throw, naming what the rendezvous knows. Gloo's own
// collectives are not used: their reductions neither take our rank order nor
// round bf16 once (Note [Communicator semantics]).

#include <chrono>
#include <cstdlib>
#include <string>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "engine/comm/communicator.h"
#include "engine/core/check.h"
#include "engine/distributed/gloo_mesh.h"
#include "engine/distributed/gloo_watch.h"

namespace fanout::comm {

namespace {

using Clock = std::chrono::steady_clock;
using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;

constexpr uint8_t kSlotPrefix = 0x43;  // 'C'; the context is ours alone

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(distributed::Rendezvous& r, Device device, double timeout_s,
                   const std::string& name)
      : Communicator(r.rank(), r.world(), device),
        rendezvous_(r),
        store_(r),
        prefixed_(name, store_),
        timeout_(static_cast<int64_t>(timeout_s * 1000)),
        watch_(r) {
    try {
      distributed::GlooMesh m = distributed::gloo_connect_mesh(r, prefixed_, timeout_);
      device_ = std::move(m.device);
      context_ = std::move(m.context);
    } catch (const std::exception& e) {
      fail("connecting the members", e.what());
    }
  }
  const char* backend() const override { return "gloo"; }

 protected:
  void exchange(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) override {
    const uint64_t slot = gloo::Slot::build(kSlotPrefix, static_cast<uint32_t>(++exchanges_));
    std::vector<Buffer> out, in;
    try {
      for (int j = 0; j < size(); ++j) {
        if (j == rank()) continue;
        if (sends[j].defined() && sends[j].nbytes() > 0) {
          out.push_back(context_->createUnboundBuffer(sends[j].raw(), sends[j].nbytes()));
          out.back()->send(j, slot);
        }
        if (recvs[j].defined() && recvs[j].nbytes() > 0) {
          in.push_back(context_->createUnboundBuffer(recvs[j].raw(), recvs[j].nbytes()));
          in.back()->recv(j, slot);
        }
      }
      const auto deadline = Clock::now() + timeout_;
      for (Buffer& b : in) watch_.wait_recv(*b, deadline);
      for (Buffer& b : out) watch_.wait_send(*b, deadline);
    } catch (const std::exception& e) {
      strand(std::move(out), std::move(in), sends, recvs);
      fail(doing(), e.what());
    }
  }

 private:
  // Note [Buffers of a failed exchange] (gloo_watch.h).
  void strand(std::vector<Buffer> out, std::vector<Buffer> in, const std::vector<Tensor>& sends,
              const std::vector<Tensor>& recvs) {
    struct Stranded {
      std::vector<Buffer> out, in;
      std::vector<Tensor> sends, recvs;
      std::shared_ptr<gloo::transport::Device> device;
      std::shared_ptr<gloo::rendezvous::Context> context;
    };
    distributed::keep_for_process(std::make_shared<Stranded>(
        Stranded{std::move(out), std::move(in), sends, recvs, device_, context_}));
  }

  [[noreturn]] void fail(const char* what, const std::string& cause) {
    detail::throw_error(detail::str_cat("rank ", rank(), ": ", what,
                                        " failed: ", rendezvous_.describe_failure(),
                                        " (gloo: ", watch_.cause(cause), ")"));
  }

  distributed::Rendezvous& rendezvous_;
  distributed::GlooRendezvousStore store_;
  gloo::rendezvous::PrefixStore prefixed_;
  std::chrono::milliseconds timeout_;
  distributed::GlooWatch watch_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t exchanges_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(distributed::Rendezvous& rendezvous,
                                                     Device device, double timeout_s,
                                                     const std::string& name) {
  FANOUT_CHECK(device.is_cpu() && !device.is_bare(), "Gloo communicators need a CPU device, got ",
               device.str());
  return std::make_unique<GlooCommunicator>(rendezvous, device, timeout_s, name);
}

}  // namespace fanout::comm
