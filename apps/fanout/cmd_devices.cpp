// `fanout devices`: what this machine offers (CPU devices, each CUDA device with
// its name, memory and SM count), or, with --devices, a check of a device list.

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "apps/fanout/commands.h"
#include "engine/core/allocator.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/device.h"

namespace fanout::app {

Command add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices fanout can use on this machine");
  auto list = std::make_shared<std::string>();
  CLI::Option* check = cmd->add_option("--devices", *list,
                                       "Check a device list (e.g. cpu:0,cpu:1 or cuda:0) instead");
  return [cmd, check, list]() -> int {
    if (!cmd->parsed()) return -1;
    if (check->count() > 0) {
      std::vector<Device> devices = devices_parse(*list);
      devices_check_available(devices);
      std::printf("ok: %s\n", devices_str(devices).c_str());
      return 0;
    }
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    std::printf(
        "cpu: %u cores; CPU devices cpu:0, cpu:1, ... are simulated devices with their "
        "own allocator and streams\n",
        cores);
    int n = cuda_device_count();
    if (n == 0) {
      std::printf("cuda: %s\n", cuda_unavailable_reason().c_str());
      return 0;
    }
    for (int i = 0; i < n; ++i) {
      CudaDeviceInfo info = cuda_device_info(i);
      std::printf("cuda:%d: %s, %s, %d SMs, compute capability %d.%d\n", i, info.name.c_str(),
                  bytes_str(info.total_bytes).c_str(), info.sm_count, info.major, info.minor);
    }
    return 0;
  };
}

}  // namespace fanout::app
