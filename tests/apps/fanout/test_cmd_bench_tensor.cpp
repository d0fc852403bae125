// fanout bench's tensor-parallel rows: tp splits the weights, their gradients and
// AdamW's state over the devices (a quarter each on 4), pp-tp combines two
// stages with tensor ranks; where the model does not divide over every device,
// the most devices that it does, the rest replicas.

#include <doctest/doctest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "models/llama_config.h"
#include "models/llama_layout.h"
#include "tests/apps/fanout/bench_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using test::has;

TEST_CASE("bench tp rows: each of 4 devices holds a quarter of the weights, gradients and state") {
  test::TempDir dir("fanout-bench-tp");
  models::LlamaConfig c = models::llama_preset("tiny");
  c.num_key_value_heads = 4;  // 4 heads, 4 key-value heads: --tp 4 divides them
  c.vocab_size = 260;         // no padding rows: the quarters are exact
  models::llama_config_save(c, dir / "config.json");
  auto r = test::run_fanout({"bench",
                             "--devices",
                             "cpu:0,cpu:1,cpu:2,cpu:3",
                             "--config",
                             dir / "config.json",
                             "--modes",
                             "dp,tp,pp-tp",
                             "--batch-size",
                             "8",
                             "--seq-len",
                             "32",
                             "--steps",
                             "2",
                             "--warmup",
                             "1",
                             "--min-seconds",
                             "0",
                             "--precision",
                             "fp32",
                             "--wide",
                             "--json",
                             dir / "b.json"},
                            "timeout 300");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  std::map<std::string, nlohmann::json> by_mode = test::bench_rows_by_mode(dir / "b.json");
  REQUIRE(by_mode["tp"]["status"] == "ok");
  REQUIRE(by_mode["pp-tp"]["status"] == "ok");
  CHECK(by_mode["tp"]["tensor"] == 4);
  CHECK(by_mode["pp-tp"]["tensor"] == 2);
  CHECK(by_mode["pp-tp"]["pipeline"]["stages"] == 2);
  const models::LlamaLayout whole(c);
  const int64_t norms = (2 * c.num_hidden_layers + 1) * c.hidden_size;
  const int64_t quarter = ((whole.total() - norms) / 4 + norms) * 4;  // bytes of f32
  const nlohmann::json& tp = by_mode["tp"]["peak_bytes_by_kind"];
  const nlohmann::json& dp = by_mode["dp"]["peak_bytes_by_kind"];
  REQUIRE(tp.size() == 4);
  for (int d = 0; d < 4; ++d) {
    CAPTURE(d);
    CHECK(tp[d]["params"].get<int64_t>() == quarter);
    CHECK(tp[d]["grads"].get<int64_t>() == quarter);
    const int64_t state = tp[d]["optimizer"].get<int64_t>();  // m, v and a scalar for the norm
    CHECK(state >= 2 * quarter);
    CHECK(state <= 2 * quarter + 256);
  }
  CHECK(dp[0]["params"].get<int64_t>() == whole.total() * 4);
  CHECK(has(r.out, "tp = --tp T (T: the most devices that divide the heads"));
}

TEST_CASE("bench tp rows: the most tensor ranks the model allows, the rest replicas") {
  // The tiny preset's 2 key-value heads: tp is 2 tensor ranks x 2 replicas on 4
  // devices, pp-tp 2 stages of 2 ranks; on 3 devices no split at all (3
  // replicas), and pp-tp one stage.
  for (const char* devices : {"cpu:0,cpu:1,cpu:2,cpu:3", "cpu:0,cpu:1,cpu:2"}) {
    CAPTURE(devices);
    test::TempDir dir("fanout-bench-tp-fit");
    auto r = test::run_fanout(
        {"bench",  "--devices",     devices, "--modes",     "tp,pp-tp", "--batch-size",
         "6",      "--seq-len",     "16",    "--steps",     "1",        "--warmup",
         "0",      "--min-seconds", "0",     "--precision", "fp32",     "--wide",
         "--json", dir / "b.json"},
        "timeout 120");
    INFO(r.out << r.err);
    REQUIRE(r.rc == 0);
    std::map<std::string, nlohmann::json> by_mode = test::bench_rows_by_mode(dir / "b.json");
    const bool four = std::string(devices).size() > 20;
    CHECK(by_mode["tp"]["tensor"] == (four ? 2 : 1));
    CHECK(by_mode["pp-tp"]["tensor"] == (four ? 2 : 1));
    CHECK(by_mode["tp"]["pipeline"].is_null());
    CHECK(by_mode["pp-tp"]["pipeline"]["stages"] == (four ? 2 : 1));
  }
}
