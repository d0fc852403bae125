#pragma once
// A short sample from a trained model, shown at the end of fanout train:
// temperature 0.8 over the 20 likeliest tokens, from [BOT], until [EOT] or
// `length` tokens, decoded with the run's tokenizer and escaped for a terminal.

#include <cstdint>
#include <string>

#include "apps/data/text_tokenizer.h"
#include "models/llama_model.h"

namespace fanout::train {

std::string sample_text(models::LlamaModel& model, const data::TextTokenizer& tokenizer,
                        uint64_t seed, int64_t length);

}  // namespace fanout::train
