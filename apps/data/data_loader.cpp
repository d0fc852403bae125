#include "apps/data/data_loader.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"

namespace fanout::data {

int64_t Batch::counted() const {
  int64_t n = 0;
  for (int32_t t : targets) n += t >= 0;
  return n;
}

DataLoader::DataLoader(const TokenData& data, int64_t B, int64_t T, bool packing, bool shuffle,
                       uint64_t seed, int32_t ignore_index)
    : data_(data),
      B_(B),
      T_(T),
      packing_(packing),
      shuffle_(shuffle),
      seed_(seed),
      ignore_(ignore_index) {
  FANOUT_CHECK(B > 0 && T > 0, "batch size and sequence length must be positive");
  if (packing_) {
    int64_t n = data.token_count();
    batches_ = (n - 1) / size_mul("--batch-size x --seq-len tokens per batch", {B, T});
    FANOUT_CHECK(batches_ > 0, data.path, ": ", n, " tokens are fewer than one batch of ", B, " x ",
                 T, " + 1; use a smaller --batch-size or --seq-len");
  } else {
    FANOUT_CHECK(!data.documents.empty(), data.path,
                 ": --packing off needs documents (a text file of documents separated by blank "
                 "lines, or a token file of [BOT] doc [EOT])");
    FANOUT_CHECK(data.pad >= 0, data.path,
                 ": --packing off pads rows with [PAD], and the tokenizer has none");
    int64_t docs = static_cast<int64_t>(data.documents.size());
    batches_ = docs / B;
    FANOUT_CHECK(batches_ > 0, data.path, ": ", docs, " documents are fewer than one batch of ", B,
                 " rows; use a smaller --batch-size");
  }
}

int64_t DataLoader::window_of(int64_t epoch, int64_t index) const {
  if (!shuffle_) return index;
  // A fresh permutation per epoch, a pure function of (seed, epoch): resumable.
  std::vector<int64_t> order(batches_);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed_ ^ (0xA24BAED4963EE407ull * (epoch + 1)));
  for (int64_t i = batches_ - 1; i > 0; --i) {
    std::uniform_int_distribution<int64_t> pick(0, i);
    std::swap(order[i], order[pick(rng)]);
  }
  return order[index];
}

Batch DataLoader::batch_at(int64_t epoch, int64_t index) const {
  FANOUT_CHECK(epoch >= 0 && index >= 0 && index < batches_, "batch ", index, " of epoch ", epoch,
               " does not exist (", batches_, " batches per epoch)");
  Batch b;
  b.B = B_, b.T = T_;
  b.inputs.resize(B_ * T_);
  b.targets.resize(B_ * T_);
  int64_t w = window_of(epoch, index);
  if (packing_) {
    std::vector<int32_t> win(static_cast<size_t>(B_ * T_ + 1));
    data_.tokens_copy(w * B_ * T_, B_ * T_ + 1, win.data());
    for (int64_t i = 0; i < B_ * T_; ++i) b.inputs[i] = win[i], b.targets[i] = win[i + 1];
    return b;
  }
  for (int64_t r = 0; r < B_; ++r) {
    const std::vector<int32_t>& doc = data_.documents[w * B_ + r];
    std::vector<int32_t> row;
    row.reserve(T_ + 1);
    // The tokenizer's specials (token_file.h); one it lacks is left out.
    if (data_.bot >= 0) row.push_back(data_.bot);
    row.insert(row.end(), doc.begin(), doc.end());
    if (data_.eot >= 0) row.push_back(data_.eot);
    row.resize(T_ + 1, data_.pad);  // cut long documents, right-pad short ones
    for (int64_t t = 0; t < T_; ++t) {
      b.inputs[r * T_ + t] = row[t];
      b.targets[r * T_ + t] = row[t + 1] == data_.pad ? ignore_ : row[t + 1];
    }
  }
  return b;
}

Batch DataLoader::next() {
  Batch b = batch_at(state_.epoch, state_.index);
  if (++state_.index == batches_) state_.index = 0, ++state_.epoch;
  return b;
}

LoaderState DataLoader::state_from(LoaderState saved, int64_t rows, int64_t T) const {
  const bool same = rows == B_ && (T == T_ || !packing_);
  if (same) return saved;
  FANOUT_CHECK(rows > 0 && T > 0, "the checkpoint's batch geometry (", rows, " x ", T,
               ") is damaged");
  const std::string was = std::to_string(rows) + " x " + std::to_string(T);
  const std::string now = std::to_string(B_) + " x " + std::to_string(T_);
  FANOUT_CHECK(!shuffle_, "the checkpoint read shuffled batches of ", was,
               " (rows per micro-batch x tokens); batches of ", now,
               " would visit other data: resume with the same --batch-size / --grad-accum and "
               "--seq-len, or without --shuffle");
  // Units: tokens with packing (windows advance by rows * T), documents without.
  const int64_t unit_was = packing_ ? size_mul("the saved batch", {rows, T}) : rows;
  const int64_t unit_now = packing_ ? B_ * T_ : B_;
  const int64_t at = size_mul("the saved data position", {saved.index, unit_was});
  FANOUT_CHECK(at % unit_now == 0, "the checkpoint stopped at ", packing_ ? "token " : "document ",
               at, " of its epoch, which is not a boundary of batches of ", now,
               " (rows per micro-batch x tokens): resume with batches of ", was,
               " or a size that divides ", at);
  LoaderState s{saved.epoch, at / unit_now};
  if (s.index >= batches_) s = {saved.epoch + 1, 0};  // the rest of the epoch holds no batch
  return s;
}

void DataLoader::set_state(LoaderState s) {
  FANOUT_CHECK(s.epoch >= 0 && s.index >= 0 && s.index < batches_, "data position (epoch ", s.epoch,
               ", batch ", s.index, ") does not fit this data (", batches_, " batches per epoch)");
  state_ = s;
}

}  // namespace fanout::data
