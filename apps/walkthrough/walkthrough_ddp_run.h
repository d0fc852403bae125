#pragma once
// The walkthrough's ddp step run for real: the ranks of `fanout launch -- train
// --strategy ddp` as threads of this process, each with its own Training on its
// own CPU device and its own Gloo group over the loopback, so that the section
// can set what ProcessGroup::bytes_sent() measured beside what it computed.

#include "apps/data/token_file.h"
#include "apps/walkthrough/walkthrough.h"

namespace fanout::walkthrough::walk {

// Runs the ddp step of `d` (ddp_step_compute's figures) for real: one rank per
// device of o.devices as a thread of this process, each with its own Training over its own device
// and a Gloo group over the loopback (fanout launch runs them as processes; the
// engine's code is the same). Fills d.ran, d.measured_sent, d.losses, d.memory,
// d.timed_ms and d.last; when it cannot run (a CUDA device, two ranks on one
// device, one device) sets d.refused to one plain sentence saying why and leaves d.ran false.
// Takes over the process-wide trace recorder while it runs: on for o.steps
// narrated steps, off for o.timed_steps timed ones, then as it was.
void ddp_step_run(const WalkthroughOptions& o, const data::TokenData& data, WalkthroughDdp& d);

}  // namespace fanout::walkthrough::walk
