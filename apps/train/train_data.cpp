#include "apps/train/train_data.h"

#include <cstdio>

#include "apps/data/corpus.h"
#include "apps/data/held_out.h"
#include "engine/core/check.h"

namespace fanout::train {

namespace {

// Whether `d` holds one batch of the run's geometry (the loaders' own rule).
bool holds_a_batch(const data::TokenData& d, const TrainOptions& o, const Setup& s) {
  if (o.packing == "off") return static_cast<int64_t>(d.documents.size()) >= s.micro_rows;
  return d.token_count() - 1 >= s.micro_rows * o.seq_len;  // bounded by train_prepare
}

// --data through the run's tokenizer, its ids checked against the model.
data::TokenData data_load(const std::string& path, const Setup& s) {
  data::TokenData d = data::token_file_load(path, {}, *s.tokenizer);
  data::token_data_check_vocab(d, s.config.vocab_size);
  return d;
}

std::string percent_str(int64_t part, int64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%%", 100.0 * static_cast<double>(part) / whole);
  return buf;
}

}  // namespace

void train_data_load(TrainOptions& o, Setup& s) {
  const data::TextTokenizer& tok = *s.tokenizer;
  if (o.data.empty()) {
    data::Corpus corpus = data::default_corpus();
    const bool bytes = tok.is_byte();
    const char* train_name = "<embedded default corpus: train>";
    const char* val_name = "<embedded default corpus: held out>";
    s.train_data = bytes ? data::corpus_token_data(corpus.train_documents, train_name)
                         : data::token_data_from_documents(corpus.train_documents, tok, train_name);
    s.val_data = bytes ? data::corpus_token_data(corpus.heldout_documents, val_name)
                       : data::token_data_from_documents(corpus.heldout_documents, tok, val_name);
    s.has_val = s.embedded = true;
    s.unigram = data::unigram_entropy(s.train_data.tokens);
    data::token_data_check_vocab(s.train_data, s.config.vocab_size);
  } else {
    s.train_data = data_load(o.data, s);
  }
  if (!o.val_data.empty()) {
    s.val_data = data::token_file_load(o.val_data, {}, tok);
    s.has_val = true;
  }
  if (s.has_val) data::token_data_check_vocab(s.val_data, s.config.vocab_size);
  const int64_t total = s.train_data.token_count();
  if (!o.data.empty() && !s.has_val) {
    s.held_out = data::held_out_count(total, o.val_split);
    if (s.held_out > 0) {
      s.val_data = data::token_data_hold_out(s.train_data, s.held_out);
      s.held_out = s.val_data.token_count();
      s.has_val = true;
    }
  }
  if (o.packing == "off") {
    const int32_t pad = s.train_data.pad;
    FANOUT_CHECK(pad >= 0, "--packing off pads rows with [PAD], and the tokenizer (",
                 tok.describe(), ") has none; use --packing on");
    FANOUT_CHECK(s.config.vocab_size > pad, "--packing off pads with id ", pad,
                 ", which needs a vocabulary of at least ", pad + 1, " tokens");
    // Token files hold one stream: their documents are cut out of it (token_file.h).
    if (s.train_data.from_bin) data::token_data_split_documents(s.train_data);
    if (s.has_val && s.val_data.from_bin) data::token_data_split_documents(s.val_data);
  }
  if (s.held_out == 0) return;
  // A resumed run keeps the split it started with; the loaders say what does not fit.
  if (!s.resume && !(holds_a_batch(s.train_data, o, s) && holds_a_batch(s.val_data, o, s))) {
    const std::string too_few = detail::str_cat(
        o.data, ": ", total, " tokens are too few to hold out ", percent_str(s.held_out, total),
        " in batches of ", s.micro_rows, " x ", o.seq_len);
    FANOUT_CHECK(!o.save_best && o.early_stop == 0, "--", o.save_best ? "save-best" : "early-stop",
                 " compares held-out losses, and ", too_few, ": give --val-data FILE");
    s.notes.push_back(too_few +
                      ": training on all of them, with no held-out loss (give --val-data FILE)");
    s.held_out = 0, o.val_split = 0, s.has_val = false;
    s.val_data = {};
    s.train_data = data_load(o.data, s);
    if (o.packing == "off" && s.train_data.from_bin) data::token_data_split_documents(s.train_data);
    return;
  }
  s.notes.push_back(
      detail::str_cat("held out the last ", s.held_out, " tokens (", percent_str(s.held_out, total),
                      ") of ", o.data,
                      " for the held-out loss, not trained on (--val-data FILE overrides; "
                      "--val-split 0 trains on all)"));
}

}  // namespace fanout::train
