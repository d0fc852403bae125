#pragma once
// A run's data, loaded for train_prepare: the embedded corpus or --data through the
// run's tokenizer, --val-data or else a held-out split of --data itself (--val-split:
// Note [A run's own held-out split] in apps/data/held_out.cpp), and the documents
// of token files for --packing off.

#include <set>
#include <string>

#include "apps/train/train_setup.h"

namespace fanout::train {

// Fills s.train_data, s.val_data, s.has_val, s.embedded, s.unigram and s.held_out
// with `s.tokenizer`, s.config and s.micro_rows set; adds the split's line to
// s.notes. A fresh run whose --data is too small to hold out a batch of its geometry
// trains on all of it and sets o.val_split to 0, so its checkpoints say so.
void train_data_load(TrainOptions& o, Setup& s);

}  // namespace fanout::train
