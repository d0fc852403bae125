#include "apps/train/ddp_env.h"

#include <cstdlib>

#include "engine/core/check.h"

namespace fanout::train {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  FANOUT_CHECK(v != nullptr, "--strategy ddp needs the environment variable ", name,
               " (start it with fanout launch, torchrun or an MPI/Slurm wrapper)");
  try {
    size_t used = 0;
    int x = std::stoi(v, &used);
    FANOUT_CHECK(used == std::string(v).size() && x >= 0, "bad ", name, "='", v, "'");
    return x;
  } catch (const Error&) {
    throw;
  } catch (...) {
    detail::throw_error(detail::str_cat("bad ", name, "='", v, "'"));
  }
}
}  // namespace

std::pair<int64_t, int64_t> DdpEnv::rows_of(int64_t rows) const {
  // The engine's own split: 10 rows over 4 ranks -> 3, 3, 2, 2.
  int64_t base = rows / world, extra = rows % world;
  int64_t count = base + (rank < extra ? 1 : 0);
  int64_t first = rank * base + std::min<int64_t>(rank, extra);
  return {first, count};
}

DdpEnv ddp_env_from_environment() {
  DdpEnv e;
  e.enabled = true;
  e.rank = env_int("RANK");
  e.world = env_int("WORLD_SIZE");
  e.local_rank = env_int("LOCAL_RANK");
  e.local_world = std::getenv("LOCAL_WORLD_SIZE") ? env_int("LOCAL_WORLD_SIZE") : e.world;
  const char* addr = std::getenv("MASTER_ADDR");
  FANOUT_CHECK(addr != nullptr && *addr, "--strategy ddp needs MASTER_ADDR");
  e.master_addr = addr;
  e.master_port = env_int("MASTER_PORT");
  FANOUT_CHECK(e.world >= 1 && e.rank < e.world, "RANK ", e.rank, " is not below WORLD_SIZE ",
               e.world);
  FANOUT_CHECK(e.local_rank < e.local_world, "LOCAL_RANK ", e.local_rank,
               " is not below LOCAL_WORLD_SIZE ", e.local_world);
  return e;
}

Device ddp_device(const DdpEnv& env, const std::vector<Device>& devices) {
  if (devices.size() == 1 && devices[0].is_bare())
    return device_resolve(devices[0], env.local_rank);
  FANOUT_CHECK(static_cast<int>(devices.size()) == env.local_world,
               "across processes --devices takes cpu or cuda (each rank uses device LOCAL_RANK), "
               "or one device per local rank (several devices per process are not supported "
               "with several processes); got ",
               devices.size(), " for ", env.local_world, " local ranks");
  return devices[env.local_rank];
}

DdpGroup ddp_connect(const DdpEnv& env, Device device, double timeout_s) {
  FANOUT_CHECK(timeout_s > 0, "--timeout must be positive");
  DdpGroup g;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  g.rendezvous = std::make_unique<parallel::Rendezvous>(env.master_addr, env.master_port, env.rank,
                                                        env.world, timeout);
  g.group = device.is_cuda() ? parallel::make_nccl_group(*g.rendezvous, device)
                             : parallel::make_gloo_group(*g.rendezvous, timeout_s);
  return g;
}

}  // namespace fanout::train
