#pragma once
// A run's batch geometry: the part of its setup that follows from the rows per
// step -- each micro-batch's rows and the devices' shares of them, a pipeline's
// micro-batches and cut, the memory a step needs at the least, the data holding a
// batch, and a resumed run's data position in this run's batches. train_prepare
// settles it once; --batch-size auto (batch_finder.h) settles it again for every
// size it tries and for the one it keeps.

#include <cstdint>
#include <set>
#include <string>

#include "apps/data/data_loader.h"
#include "apps/train/train_options.h"
#include "apps/train/train_setup.h"

namespace fanout::train {

// The data-parallel replicas a batch's rows are split over: the processes under
// ddp, a grid's D (devices / (pp x tp)), else the devices.
int64_t setup_replicas(const TrainOptions& o, const Setup& s);

// The fewest rows one replica's micro-batch can have: a pipeline's given
// --micro-batches, else 1.
int64_t setup_min_replica_rows(const TrainOptions& o, const std::set<std::string>& given);

// Rows a micro-batch may take from the run's data (the training data, and the
// held-out data when there is some): the loaders' rows per epoch.
int64_t setup_data_rows(const Setup& s);

// The run's training batches (its packing, shuffle and seed) of `rows` rows
// each (0: a micro-batch's), from the data's beginning.
data::DataLoader setup_train_loader(const Setup& s, int64_t rows = 0);

// Sets s.o.batch_size and s.o.grad_accum, and everything that follows from them;
// throws fanout::Error for the first that does not fit. `trial`: a finder's trial
// run, which starts from the data's beginning (a resumed position is not mapped).
void setup_batch(Setup& s, int64_t batch_size, int64_t grad_accum,
                 const std::set<std::string>& given, bool trial = false);

}  // namespace fanout::train
