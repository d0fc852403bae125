// The walkthrough's pipeline section narrates a real 1F1B step: its loss equals
// dp's on the same batch and weights, the grid has a row per stage, the bubble
// is measured, and the bytes between stages are each micro-batch's hidden state
// and its gradient -- none when both stages share one device.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "apps/walkthrough/walkthrough.h"

using namespace fanout;
using namespace fanout::walkthrough;

TEST_CASE("the walkthrough's pipeline section: dp's loss, a row per stage, the boundary bytes") {
  for (const char* devices : {"cpu:0,cpu:1", "cpu:0"}) {
    CAPTURE(devices);
    WalkthroughOptions o;
    o.devices = devices_parse(devices);
    o.batch_size = 5;
    o.seq_len = 16;
    o.steps = 1;
    std::ostringstream text;
    const WalkthroughResult r = walkthrough_run(o, text);
    const WalkthroughPipeline& p = r.pipeline;
    CHECK(p.stages == 2);
    CHECK(p.micro_batches == 4);
    CHECK(std::abs(p.loss - r.modes[0].losses[0]) <= 1e-5 * r.modes[0].losses[0]);
    CHECK(p.dp_loss == r.modes[0].losses[0]);
    CHECK(std::count(p.grid.begin(), p.grid.end(), '\n') + (p.grid.back() != '\n') == 2);
    CHECK(p.bubble_schedule == doctest::Approx(0.2));  // (K - 1) / (M + K - 1)
    CHECK(p.bubble_measured > 0);
    CHECK(p.bubble_measured < 1);
    // 5 rows of 16 tokens, hidden size floats, forward and back over one boundary.
    const int64_t both_ways = 2 * 5 * 16 * o.config.hidden_size * 4;
    CHECK(p.boundary_bytes == (o.devices.size() == 2 ? both_ways : 0));
    const std::string s = text.str();
    CHECK(s.find("pipeline: the model cut into stages (--pp 2)") != std::string::npos);
    CHECK(s.find("the same model, computed in pieces") != std::string::npos);
  }
}
