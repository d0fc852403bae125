#pragma once
// The loss the trainer hands the DataParallel engine for faithful dp: token
// cross-entropy on the gathered logits (sum and count forward, dlogits in place
// backward), through ops/cross_entropy.

#include "engine/parallel/data_parallel.h"

namespace fanout::train {

parallel::LossFunctions cross_entropy_loss_functions();

}  // namespace fanout::train
