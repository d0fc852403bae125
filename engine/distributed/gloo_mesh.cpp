#include "engine/distributed/gloo_mesh.h"

#include <signal.h>
#include <sys/socket.h>

#include <cstdint>

#include <gloo/transport/tcp/device.h>

#include "engine/distributed/rendezvous_wire.h"

namespace fanout::distributed {

namespace {
// What gloo::transport::tcp::Address::bytes() holds for one pair: a sockaddr_storage
// and a sequence number. Every rank publishes W - 1 of them in the store.
constexpr int64_t kGlooAddressBytes = sizeof(sockaddr_storage) + sizeof(int64_t);
static_assert(int64_t{kMaxGlooWorld} * (kMaxGlooWorld - 1) * kGlooAddressBytes <=
                  static_cast<int64_t>(wire::kMaxStoreBytes),
              "a Gloo mesh of kMaxGlooWorld ranks must fit the rendezvous store");

void ignore_sigpipe_unless_handled() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL &&
      !(now.sa_flags & SA_SIGINFO))
    ::signal(SIGPIPE, SIG_IGN);
}
}  // namespace

GlooMesh gloo_connect_mesh(Rendezvous& r, gloo::rendezvous::Store& store,
                           std::chrono::milliseconds timeout) {
  ignore_sigpipe_unless_handled();
  r.wait_for_all(timeout);  // no pairs for ranks that never came (Rendezvous::wait_for_all)
  gloo::transport::tcp::attr attr;
  attr.hostname = r.local_address();
  GlooMesh m;
  m.device = gloo::transport::tcp::CreateDevice(attr);
  m.context = std::make_shared<gloo::rendezvous::Context>(r.rank(), r.world());
  m.context->setTimeout(timeout);
  m.context->connectFullMesh(store, m.device);
  return m;
}

}  // namespace fanout::distributed
