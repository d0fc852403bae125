#pragma once
// What the Gloo process group (gloo_group.cpp) and the users' Gloo communicator
// (gloo_communicator.cpp) share: a gloo store over the rendezvous, and a full
// mesh of TCP pairs between the ranks, listening on the address the rank's
// rendezvous connection leaves from (the interface the other ranks reach it on).
// Internal to engine/parallel.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

#include "engine/distributed/rendezvous.h"

namespace fanout::distributed {

class GlooRendezvousStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooRendezvousStore(Rendezvous& r) : r_(r) {}
  void set(const std::string& key, const std::vector<char>& data) override { r_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return r_.get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) r_.get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);  // the rendezvous bounds every get by its own timeout
  }

 private:
  Rendezvous& r_;
};

struct GlooMesh {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

// Connects this rank to every other through `store` (keys under its prefix, if
// any), once every rank has said hello to the rendezvous; every operation is
// bounded by `timeout`. Gloo writes to a dead peer's
// socket without MSG_NOSIGNAL, so SIGPIPE is set to be ignored first (as Python
// does for torch), when nobody has installed a handler: a peer's death must be an
// error the survivors report, not a signal that kills them silently. Throws what
// gloo throws.
GlooMesh gloo_connect_mesh(Rendezvous& r, gloo::rendezvous::Store& store,
                           std::chrono::milliseconds timeout);

}  // namespace fanout::distributed
