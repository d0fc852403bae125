#include "apps/train/sample_text.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "apps/data/terminal_text.h"
#include "models/llama_generate.h"

namespace fanout::train {

std::string sample_text(models::LlamaModel& model, const data::TextTokenizer& tokenizer,
                        uint64_t seed, int64_t length) {
  int64_t max_len = std::min<int64_t>(length + 1, model.config().max_position_embeddings);
  models::LlamaGenerator gen(model, max_len);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out;
  const int32_t bot = tokenizer.bot();
  std::vector<float> logits = gen.feed({bot >= 0 && bot < model.config().vocab_size ? bot : 0});
  for (int64_t i = 1; i < max_len; ++i) {
    // temperature 0.8 over the 20 likeliest tokens
    std::vector<int32_t> order(logits.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
    size_t k = std::min<size_t>(20, order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    std::vector<double> p(k);
    double total = 0;
    for (size_t j = 0; j < k; ++j)
      total += p[j] = std::exp((logits[order[j]] - logits[order[0]]) / 0.8);
    double u = static_cast<double>(rng() >> 11) / 9007199254740992.0 * total;
    int32_t next = order[k - 1];
    for (size_t j = 0; j < k; ++j)
      if ((u -= p[j]) <= 0) {
        next = order[j];
        break;
      }
    if (next == tokenizer.eot()) break;
    out.push_back(next);
    if (i + 1 < max_len) logits = gen.feed({next});
  }
  // Nothing to show is said, not printed as a blank line.
  if (out.empty()) return "(empty: the model ended the text at once, [EOT] first)";
  const std::string text = tokenizer.decode(out);
  if (text.empty()) {
    return "(empty: the model wrote only special tokens, " + std::to_string(out.size()) +
           " of them, which decode to no text)";
  }
  return data::terminal_text_escape(text);
}

}  // namespace fanout::train
