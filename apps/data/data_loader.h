#pragma once
// Batches of (inputs, targets) from token data.
//   Packing on (llm.c): batch k is the window tokens[k*B*T, k*B*T + B*T + 1),
//     inputs = window[:-1], targets = window[1:], read as B rows of T; windows
//     advance by B*T and wrap to the start (a new epoch) when the next would not
//     fit. --shuffle visits the windows of each epoch in a seeded random order.
//   Packing off: one document per row, [BOT] doc [EOT] cut or right-padded with
//     PAD to T+1 tokens; targets that are PAD get the ignore index.
// The position (epoch, index) is saved in checkpoints, so a resumed run reads
// exactly the batches an uninterrupted run would have read.

#include <cstdint>
#include <vector>

#include "apps/data/token_file.h"

namespace fanout::data {

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> inputs, targets;  // (B, T) row-major
  int64_t counted() const;               // targets that are not ignored
};

struct LoaderState {
  int64_t epoch = 0, index = 0;  // index: the next batch within the epoch
};

class DataLoader {
 public:
  // `data` must outlive the loader.
  DataLoader(const TokenData& data, int64_t B, int64_t T, bool packing, bool shuffle, uint64_t seed,
             int32_t ignore_index);
  DataLoader(TokenData&&, int64_t, int64_t, bool, bool, uint64_t, int32_t) = delete;

  int64_t batches_per_epoch() const { return batches_; }
  Batch next();
  // The batch `index` of `epoch` without moving the position.
  Batch batch_at(int64_t epoch, int64_t index) const;
  LoaderState state() const { return state_; }
  void set_state(LoaderState s);
  // A position saved by a loader with `rows` rows of `T` tokens per batch, in this
  // loader's batches: the same token (packing on) or document (packing off). Throws
  // when it does not fall on one of this loader's batch boundaries, or when
  // shuffled batches of another size make it meaningless.
  LoaderState state_from(LoaderState saved, int64_t rows, int64_t T) const;

 private:
  int64_t window_of(int64_t epoch, int64_t index) const;
  const TokenData& data_;
  int64_t B_, T_;
  bool packing_, shuffle_;
  uint64_t seed_;
  int32_t ignore_;
  int64_t batches_ = 0;
  LoaderState state_;
};

}  // namespace fanout::data
