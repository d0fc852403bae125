#pragma once
// Helpers shared by the model tests: weights that make a model's output far from
// uniform, and the PyTorch reference scripts under tests/reference.

#include <cstdint>
#include <string>

#include "models/llama_model.h"

namespace fanout::test {

// Note [Fused projections]: the process-wide default for the models made while it
// lives, put back after.
struct FusedProjectionsDefault {
  bool was = models::fused_projections_default();
  explicit FusedProjectionsDefault(bool on) { models::set_fused_projections_default(on); }
  ~FusedProjectionsDefault() { models::set_fused_projections_default(was); }
  FusedProjectionsDefault(const FusedProjectionsDefault&) = delete;
  FusedProjectionsDefault& operator=(const FusedProjectionsDefault&) = delete;
};

// init_random(seed), then every matrix (each parameter of two or more dimensions)
// times `scale`, and the working copy refreshed: the loss is far from uniform and
// attention depends strongly on the positions.
void init_scaled(models::LlamaModel& m, uint64_t seed, float scale);

// Runs tests/reference/<script> <args> with /usr/bin/python3 (FANOUT_REFERENCE_DIR and
// FANOUT_PYTHON override both: tests/paths_util.h), its output going to <dir>/ref.log;
// REQUIREs success and returns that output.
std::string run_reference_script(const std::string& script, const std::string& args,
                                 const std::string& dir);

}  // namespace fanout::test
