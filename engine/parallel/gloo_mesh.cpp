#include "engine/parallel/gloo_mesh.h"

#include <signal.h>

#include <gloo/transport/tcp/device.h>

namespace fanout::parallel {

namespace {
void ignore_sigpipe_unless_handled() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL &&
      !(now.sa_flags & SA_SIGINFO))
    ::signal(SIGPIPE, SIG_IGN);
}
}  // namespace

GlooMesh gloo_connect_mesh(const Rendezvous& r, gloo::rendezvous::Store& store,
                           std::chrono::milliseconds timeout) {
  ignore_sigpipe_unless_handled();
  gloo::transport::tcp::attr attr;
  attr.hostname = r.local_address();
  GlooMesh m;
  m.device = gloo::transport::tcp::CreateDevice(attr);
  m.context = std::make_shared<gloo::rendezvous::Context>(r.rank(), r.world());
  m.context->setTimeout(timeout);
  m.context->connectFullMesh(store, m.device);
  return m;
}

}  // namespace fanout::parallel
