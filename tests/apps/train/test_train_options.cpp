// The auto defaults of --projections and --graphs (apps/train/train_options.cpp):
// what each resolves to on CPU and CUDA device lists, that auto never turns graphs
// on for a run that `--graphs on` would refuse, and the one-line refusals; where
// --gemm-algo timed applies.

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "apps/train/train_options.h"
#include "engine/core/check.h"
#include "models/llama_model.h"
#include "ops/gemm_plan.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::train;
using fanout::test::error_of;

namespace {

const std::vector<Device> kCpu = {cpu_device(0), cpu_device(1)};
const std::vector<Device> kCuda = {cuda_device(0), cuda_device(0)};
const std::vector<Device> kMixed = {cuda_device(0), cpu_device(0)};

// Restores the models' projections default, which projections_apply sets.
struct ProjectionsDefault {
  bool was = models::fused_projections_default();
  ~ProjectionsDefault() { models::set_fused_projections_default(was); }
};

}  // namespace

TEST_CASE("all_cuda: every device a CUDA device, and at least one") {
  CHECK(all_cuda(kCuda));
  CHECK(all_cuda({cuda_device(1)}));
  CHECK_FALSE(all_cuda(kCpu));
  CHECK_FALSE(all_cuda(kMixed));
  CHECK_FALSE(all_cuda({}));
}

TEST_CASE("any_cuda: at least one CUDA device") {
  CHECK(any_cuda(kCuda));
  CHECK(any_cuda(kMixed));
  CHECK_FALSE(any_cuda(kCpu));
  CHECK_FALSE(any_cuda({}));
}

TEST_CASE("--projections auto is fused on CUDA devices and separate elsewhere") {
  ProjectionsDefault keep;
  CHECK(projections_apply("auto", kCuda) == "fused");
  CHECK(models::fused_projections_default());
  CHECK(projections_apply("auto", kCpu) == "separate");
  CHECK_FALSE(models::fused_projections_default());
  CHECK(projections_apply("auto", kMixed) == "separate");
  // Given, they hold on any devices.
  CHECK(projections_apply("fused", kCpu) == "fused");
  CHECK(models::fused_projections_default());
  CHECK(projections_apply("separate", kCuda) == "separate");
  CHECK_FALSE(models::fused_projections_default());
  CHECK(error_of([] { projections_apply("Fused", kCpu); }) ==
        "--projections must be auto, fused or separate, got 'Fused'");
  CHECK_FALSE(models::fused_projections_default());  // a refusal changes nothing
}

TEST_CASE("--graphs auto is on for CUDA runs that can record, and never where on is refused") {
  // Every shape of run graphs care about: auto turns them on exactly where
  // `--graphs on` is accepted, on CUDA devices only.
  int on = 0, refused = 0;
  for (const char* strategy : {"dp", "ddp", "zero1", "zero2", "zero3"}) {
    for (const char* loss_on : {"replicas", "output"}) {
      for (bool overlap : {false, true}) {
        for (auto [pp, tp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 2}}) {
          CAPTURE(strategy);
          CAPTURE(loss_on);
          CAPTURE(overlap);
          CAPTURE(pp);
          CAPTURE(tp);
          TrainOptions o;
          o.strategy = strategy, o.loss_on = loss_on, o.overlap = overlap, o.pp = pp, o.tp = tp;
          CHECK(graphs_resolve(o, kCpu) == "off");
          CHECK(graphs_resolve(o, kMixed) == "off");
          const bool fits = graphs_fit(pp, tp, loss_on, overlap, strategy);
          CHECK(graphs_resolve(o, kCuda) == (fits ? "on" : "off"));
          o.graphs = "on";
          const std::string why = error_of([&] { graphs_resolve(o, kCpu); });
          CHECK(why.empty() == fits);
          if (!why.empty()) CHECK(why.rfind("--graphs on ", 0) == 0);
          o.graphs = "off";
          CHECK(graphs_resolve(o, kCuda) == "off");
          on += fits, refused += !fits;
        }
      }
    }
  }
  CHECK(on == 3);  // dp, ddp and zero1 with the loss on the replicas, no overlap, no grid
  CHECK(refused == 57);
}

TEST_CASE("--graphs takes auto, on or off only") {
  TrainOptions o;
  CHECK(o.graphs == "auto");
  CHECK(o.projections == "auto");
  CHECK_FALSE(graphs_parse(o, o.strategy, o.loss_on));  // auto reads as off until resolved
  for (const char* bad : {"", "yes", "ON", "auto "}) {
    o.graphs = bad;
    CHECK(error_of([&] { graphs_resolve(o, kCuda); }) ==
          std::string("--graphs must be auto, on or off, got '") + bad + "'");
  }
}

TEST_CASE("--gemm-algo timed needs a CUDA device and bf16, and sets the process's choice") {
  struct Restore {
    ~Restore() { ops::gemm_set_algo_choice(ops::GemmAlgoChoice::heuristic); }
  } restore;
  gemm_algo_apply("timed", true, kCuda);
  CHECK(ops::gemm_algo_choice() == ops::GemmAlgoChoice::timed);
  gemm_algo_apply("timed", true, kMixed);  // the CUDA device's GEMMs are timed
  CHECK(ops::gemm_algo_choice() == ops::GemmAlgoChoice::timed);
  gemm_algo_apply("heuristic", false, kCpu);  // heuristic applies anywhere
  CHECK(ops::gemm_algo_choice() == ops::GemmAlgoChoice::heuristic);
  CHECK(error_of([] { gemm_algo_apply("timed", true, kCpu); }) ==
        "--gemm-algo timed times cuBLASLt's GEMM algorithms on CUDA devices; these are CPU "
        "devices");
  CHECK(error_of([] { gemm_algo_apply("timed", false, kCuda); }) ==
        "--gemm-algo timed chooses among cuBLASLt's bf16 GEMM algorithms (fp32 GEMMs run "
        "through cublasSgemm): add --precision bf16");
  CHECK(error_of([] { gemm_algo_apply("fastest", true, kCuda); }) ==
        "--gemm-algo must be heuristic or timed, got 'fastest'");
  CHECK(ops::gemm_algo_choice() == ops::GemmAlgoChoice::heuristic);  // refusals change nothing
}
