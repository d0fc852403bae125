#pragma once
// fanout train --pp: the device grid, the schedule, the micro-batches and the
// stage cut (--balance), checked before anything is allocated.

#include <set>
#include <string>
#include <vector>

#include "apps/train/train_setup.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "models/llama_config.h"

namespace fanout::train {

// What each unit (embedding, decoder layers, head) costs under --balance params
// (its weights; a tied head counts the lm_head it reads), flops (forward and
// backward per token), or time (a short profiling run of each unit alone on
// `device`, rows x seq_len tokens).
std::vector<double> pipeline_unit_costs(const models::LlamaConfig& config, const std::string& how,
                                        Device device, int64_t rows, int64_t seq_len,
                                        DType working);

// Fills s.cut, s.pipe_schedule and s.micro_batches under --pp K > 1 and adds the
// cut's line to s.notes; under --tp T > 1 alone, one stage of one micro-batch.
// Refuses, in one line, what does not combine with them (and a T that does not
// divide the model or the devices); without --pp, the pipeline's own flags.
void prepare_pipeline(const TrainOptions& o, Setup& s, const std::set<std::string>& given);

}  // namespace fanout::train
