#include "apps/train/ddp_env.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "engine/core/check.h"
#include "engine/core/number_text.h"
#include "engine/core/open_files.h"
#include "engine/distributed/rendezvous_server.h"
#include "engine/distributed/rendezvous_wire.h"
#include "engine/distributed/torch_store.h"
#include "engine/parallel/scatter.h"

namespace fanout::train {

// Note [Rendezvous under torchrun's static launch]
// torchrun's default (static) rendezvous keeps its own TCPStore on MASTER_PORT
// and tells the workers so (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 cannot
// listen there. It serves on a free port of MASTER_ADDR instead and publishes
// "addr:port" and a random secret in torchrun's store under a key of this run
// and restart ("fanout/<run id>/<restart>/rendezvous" and ".../secret"); the
// other ranks wait for them there and connect. Under c10d rendezvous
// (TORCHELASTIC_USE_AGENT_STORE=False) MASTER_PORT is free and the usual path runs.

namespace {
std::unique_ptr<distributed::Rendezvous> rendezvous_through_torch_store(
    const DdpEnv& env, distributed::RendezvousOptions o) {
  distributed::TorchStore store(env.master_addr, env.master_port, o.timeout);
  const std::string at = env.torch_store_key + "/rendezvous",
                    secret = env.torch_store_key + "/secret";
  if (env.rank == 0) {
    if (o.secret.empty()) o.secret = distributed::random_secret();
    o.port = 0;
    auto server = distributed::Rendezvous::serve(o);
    o.port = server->port();
    store.set(secret, o.secret);  // first: a rank that sees the address finds the secret
    store.set(at, o.addr + ":" + std::to_string(o.port));
    return std::make_unique<distributed::Rendezvous>(o, std::move(server));
  }
  std::string where = store.get(at);
  size_t colon = where.rfind(':');
  const std::string port = colon == std::string::npos ? "" : where.substr(colon + 1);
  FANOUT_CHECK(colon != std::string::npos && colon > 0 &&
                   number_problem(port, true, false, 0, 0, 1, 65535, 0).empty(),
               "torchrun's store holds '", distributed::wire::printable(where), "' under '", at,
               "', not the rendezvous' addr:port");
  o.addr = where.substr(0, colon);
  o.port = static_cast<int>(parse_whole_number(port, 1, 65535, "the rendezvous' port"));
  if (o.secret.empty()) o.secret = store.get(secret);
  return std::make_unique<distributed::Rendezvous>(o);
}
}  // namespace

std::pair<int64_t, int64_t> DdpEnv::rows_of(int64_t rows) const {
  return parallel::even_split_range(rows, world, rank);  // the engine's own split
}

parallel::HostBatch DdpEnv::batch_rows(const data::Batch& b) const {
  auto [first, count] = rows_of(b.B);
  return {count, b.T, b.inputs.data() + first * b.T, b.targets.data() + first * b.T};
}

DdpEnv ddp_env_from(const distributed::EnvLookup& get) {
  DdpEnv e;
  static_cast<distributed::LauncherEnv&>(e) = distributed::launcher_env_read(get);
  e.enabled = true;
  return e;
}

DdpEnv ddp_env_from_environment() {
  return ddp_env_from(distributed::env_lookup_process);
}

void ddp_check_distinct_gpus(const std::vector<Device>& devices) {
  for (size_t i = 0; i < devices.size(); ++i) {
    FANOUT_CHECK(
        !devices[i].is_cuda() ||
            std::find(devices.begin(), devices.begin() + i, devices[i]) == devices.begin() + i,
        "ddp puts one process on each GPU and NCCL refuses two on one, but ", devices[i].str(),
        " is listed twice: list distinct GPUs (two replicas on one GPU run in one process: "
        "--strategy dp or zero1..zero3)");
  }
}

Device ddp_device(const DdpEnv& env, const std::vector<Device>& devices) {
  if (devices.size() == 1 && devices[0].is_bare())
    return device_resolve(devices[0], env.local_rank);
  ddp_check_distinct_gpus(devices);
  FANOUT_CHECK(static_cast<int>(devices.size()) == env.local_world,
               "across processes --devices takes cpu or cuda (each rank uses device LOCAL_RANK), "
               "or one device per local rank (several devices per process are not supported "
               "with several processes); got ",
               devices.size(), " for ", env.local_world, " local ranks");
  return devices[env.local_rank];
}

// Note [Bounded ddp start-up]
// --timeout bounds the whole start-up, failures included: the rendezvous (every
// rank reaches the master), then a meeting of all ranks (Rendezvous::wait_for_all)
// before any library builds a connection per peer, then the Gloo or NCCL mesh.
// A world that cannot assemble fails at the meeting, in one line naming the
// absent ranks, with nothing per peer to tear down; a WORLD_SIZE past what the
// rendezvous (kMaxWorldSize) or a Gloo mesh (kMaxGlooWorld) holds is refused
// before anything connects, and so is one whose sockets the open-file limit
// cannot hold (open_files.h; the soft limit is raised first where it can be).

DdpGroup ddp_connect(const DdpEnv& env, Device device, double timeout_s, bool announce) {
  FANOUT_CHECK(timeout_s > 0, "--timeout must be positive");
  FANOUT_CHECK(device.is_cuda() || env.world <= distributed::kMaxGlooWorld, env.world_var, "=",
               env.world, " is more ranks than --devices cpu joins (at most ",
               distributed::kMaxGlooWorld,
               ": its Gloo mesh passes every rank's address for each other rank through rank 0's "
               "rendezvous)");
  // Sockets before any opens: one per peer in a Gloo mesh, one per rank at rank 0's
  // rendezvous, and a margin for the files every run holds.
  const int64_t peers = device.is_cuda() ? 0 : env.world, served = env.is_main() ? env.world : 0;
  open_files_ensure(peers + served + 64,
                    detail::str_cat("rank ", env.rank, " of ", env.world, " ranks"));
  const auto start = std::chrono::steady_clock::now();
  if (announce && env.is_main()) {
    std::printf("%s\n", distributed::launcher_line(env).c_str());
    std::fflush(stdout);
  }
  DdpGroup g;
  distributed::RendezvousOptions o;
  o.addr = env.master_addr, o.port = env.master_port;
  o.rank = env.rank, o.world = env.world;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  o.secret = env.secret, o.job = env.job;
  g.rendezvous = env.torch_agent_store ? rendezvous_through_torch_store(env, o)
                                       : std::make_unique<distributed::Rendezvous>(o);
  g.rendezvous->wait_for_all(o.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - start));
  g.group = device.is_cuda() ? distributed::make_nccl_group(*g.rendezvous, device, timeout_s)
                             : distributed::make_gloo_group(*g.rendezvous, timeout_s);
  return g;
}

}  // namespace fanout::train
