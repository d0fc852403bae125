#pragma once
// Tensor parallelism for Llama (Note [Tensor parallelism]): the config each of T
// shards computes with, the one-line refusals of a T that does not divide the
// model, and where a shard's flat layout sits in the whole model's.

#include <cstdint>
#include <vector>

#include "engine/parallel/pipeline/stage.h"
#include "models/llama_config.h"

namespace fanout::parallel {
class TensorPeers;
}

namespace fanout::models {

// One shard's place in its tensor-parallel group: rank of size, and the peers
// it sums with (null when size == 1).
struct TensorShard {
  int rank = 0, size = 1;
  parallel::TensorPeers* peers = nullptr;
  // Note [Sequence parallelism]: the residual stream and the norms sharded by rows.
  bool sequence = false;
};

// fanout::Error naming the first size that T does not divide: attention heads,
// key-value heads, intermediate_size (each shard holds whole heads and whole
// key-value groups), or T < 1.
void check_tensor_parallel(const LlamaConfig& whole, int T);

// The vocabulary rows each shard holds: vocab_size rounded up to a multiple of
// T, divided by T (the last shard's rows past vocab_size are padding, zero).
int64_t tensor_vocab_rows(const LlamaConfig& whole, int T);

// The config of one shard: heads, key-value heads and intermediate_size divided
// by T, tensor_vocab_rows as its vocabulary; head_dim, hidden_size and the rest
// unchanged (no special token ids: they index the whole vocabulary).
LlamaConfig tensor_shard_config(const LlamaConfig& whole, int T);

// Shard `rank`'s flat layout (LlamaLayout of tensor_shard_config) in pieces of
// the whole model's: row blocks of q/k/v, gate/up, the embedding and lm_head;
// column blocks (one piece per row) of o_proj and down_proj; whole norm weights
// (shared). In the shard's layout order.
std::vector<parallel::FlatPiece> tensor_shard_pieces(const LlamaConfig& whole, int T, int rank);

}  // namespace fanout::models
