#pragma once
// The device grid of one process: D data-parallel replicas x K pipeline stages x
// T tensor-parallel ranks, devices[(d * K + s) * T + t] (tensor peers
// neighbours, then the stages of a replica). Pipeline (pipeline/pipeline.h)
// runs it; this says it in words.

#include <string>
#include <vector>

#include "engine/core/device.h"

namespace fanout::parallel {

// "2 replicas x 2 stages x 2 tensor ranks: replica 0 = stage 0 on cpu:0+cpu:1,
// stage 1 on cpu:2+cpu:3; replica 1 = ..." (the axes of size 1 left out).
// FANOUT_CHECK: stages x tensor divides the device count.
std::string describe_grid(const std::vector<Device>& devices, int stages, int tensor);

}  // namespace fanout::parallel
