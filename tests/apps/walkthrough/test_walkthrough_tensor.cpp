// The walkthrough's tensor-parallel section narrates a real --tp 2 step: its
// loss equals dp's on the same batch and weights, each device's share is named,
// and the bytes that crossed are the all-reduces and the loss's gather exactly
// -- none when both ranks share one device; a model two devices cannot share is
// said so in one line.

#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <sstream>
#include <string>

#include "apps/walkthrough/walkthrough.h"

using namespace fanout;
using namespace fanout::walkthrough;

TEST_CASE("the walkthrough's tensor section: dp's loss, each device's share, the bytes moved") {
  for (const char* devices : {"cpu:0,cpu:1", "cpu:0"}) {
    CAPTURE(devices);
    WalkthroughOptions o;
    o.devices = devices_parse(devices);
    o.batch_size = 5;
    o.seq_len = 16;
    o.steps = 1;
    std::ostringstream text;
    const WalkthroughResult r = walkthrough_run(o, text);
    const WalkthroughTensor& t = r.tensor;
    REQUIRE(t.ranks == 2);
    CHECK(std::abs(t.loss - r.modes[0].losses[0]) <= 1e-5 * r.modes[0].losses[0]);
    CHECK(t.all_reduce_bytes == 5 * 16 * o.config.hidden_size * 4);
    CHECK(t.all_reduces == 4 * o.config.num_hidden_layers + 2);
    CHECK(t.bytes_moved == (o.devices.size() == 2 ? t.bytes_expected : 0));
    REQUIRE(t.holds.size() == 2);
    CHECK(t.holds[0].find("query heads 0-1 and key-value head 0") == 0);
    CHECK(t.holds[1].find("vocabulary rows 130-258") != std::string::npos);
    // The prose wraps: one space for every run of blanks.
    std::string s;
    for (char c : text.str())
      if (!std::isspace(static_cast<unsigned char>(c)) || (!s.empty() && s.back() != ' '))
        s += std::isspace(static_cast<unsigned char>(c)) ? ' ' : c;
    CHECK(s.find("tensor parallelism: every weight matrix split (--tp 2)") != std::string::npos);
    CHECK(s.find("the same model, each matrix computed in pieces") != std::string::npos);
  }
}

TEST_CASE("the walkthrough's tensor section says why a model cannot be split") {
  WalkthroughOptions o;
  o.devices = devices_parse("cpu:0,cpu:1");
  o.config.num_attention_heads = 3, o.config.num_key_value_heads = 1, o.config.head_dim = 42;
  o.config.hidden_size = 126;
  o.batch_size = 4;
  o.seq_len = 8;
  o.steps = 1;
  std::ostringstream text;
  const WalkthroughResult r = walkthrough_run(o, text);
  CHECK(r.tensor.ranks == 0);
  CHECK(text.str().find("--tp 2 does not divide num_attention_heads (3)") != std::string::npos);
}
