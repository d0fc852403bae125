#pragma once
// The files fanout's data commands create, and how an existing one is known to be
// of the same kind and so may be replaced (Note [Replacing an existing output] in
// engine/core/file_io.h): a tokenizer.json (tokenizer train --out, tokenizer encode
// --write-tokenizer) and an llm.c token file (prepare's train.bin and val.bin).

#include <string>
#include <vector>

#include "engine/core/file_io.h"

namespace fanout::data {

// A JSON object with a "model" object, as every HF tokenizer.json has; never one of
// `inputs`.
OutputRules tokenizer_json_output(std::vector<std::string> inputs);

// A file that starts with an llm.c token file's magic number; never one of `inputs`.
OutputRules token_file_output(std::vector<std::string> inputs);

}  // namespace fanout::data
