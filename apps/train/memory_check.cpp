#include "apps/train/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/core/check.h"
#include "engine/core/checked_math.h"

namespace fanout::train {

namespace {
// Activation floats per token a replica needs at the least: per layer the saved
// norms, q/k/v/attention and MLP values, then the logits. A lower bound of the
// model's arena (models/llama_model.cpp), so a refusal is never wrong.
int64_t min_activation_floats_per_token(const models::LlamaConfig& c) {
  const std::string what = "the activations of one token";
  const int64_t q = size_mul(what, {c.num_attention_heads, c.head_dim});
  const int64_t kv = size_mul(what, {c.num_key_value_heads, c.head_dim});
  const int64_t per_layer =
      size_add(what, {size_mul(what, {4, c.hidden_size}), size_mul(what, {2, q}),
                      size_mul(what, {2, kv}), size_mul(what, {3, c.intermediate_size})});
  return size_add(what, {size_mul(what, {c.num_hidden_layers, per_layer}), c.vocab_size});
}

std::string gib_str(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}
}  // namespace

int64_t memory_largest_share(int64_t rows, int64_t replicas) {
  replicas = std::max<int64_t>(1, replicas);
  return rows / replicas + (rows % replicas != 0);
}

void memory_check_fits(const models::LlamaConfig& config, const std::vector<Device>& devices,
                       const MemoryAsk& ask) {
  FANOUT_CHECK(ask.batch_rows > 0 && ask.seq_len > 0,
               "--batch-size and --seq-len must be positive");
  const int64_t tokens = size_mul("--batch-size x --seq-len tokens", {ask.batch_rows, ask.seq_len});
  int64_t cpu_replicas = 0;
  for (const Device& d : devices) cpu_replicas += d.is_cpu();
  const int64_t act =
      size_mul("the activations of one replica in bytes",
               {ask.replica_rows, ask.seq_len, min_activation_floats_per_token(config), 4});
  const int64_t weights = size_mul("the model's parameters in bytes", {config.num_parameters(), 4});
  // Token ids (inputs and targets) always live on the host.
  int64_t need = size_mul("the token ids in bytes", {tokens, 2, 4});
  // Weights and gradients per replica: whole, or (zero2, zero3) a share of them.
  const int64_t shares = std::max<int64_t>(1, ask.shards);
  const int64_t weight_bytes = ask.sharded_weights ? weights / shares : weights;
  const int64_t grad_bytes = ask.sharded_grads ? weights / shares : weights;
  const int64_t replica =
      size_add("one replica's memory", {size_add("", {weight_bytes, grad_bytes}), act});
  need = size_add("the memory of the run",
                  {need, size_mul("the memory of the CPU replicas", {replica, cpu_replicas})});
  if (ask.optimizer_state && cpu_replicas > 0) {
    need = size_add("the memory of the run", {need, size_mul("AdamW's state", {weights, 2})});
  }
  if (ask.gather_logits && !devices.empty() && devices[0].is_cpu()) {
    need = size_add("the memory of the run",
                    {need, size_mul("the gathered logits (--batch-size x --seq-len x vocab x 4 "
                                    "bytes)",
                                    {tokens, config.vocab_size, 4})});
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;  // unknown: the allocator will say
  const int64_t phys = size_mul("physical memory", {pages, page});
  FANOUT_CHECK(need <= phys, "a batch of ", ask.batch_rows, " x ", ask.seq_len,
               " tokens needs at least ", gib_str(need), " of memory, more than this machine's ",
               gib_str(phys), "; use a smaller --batch-size or --seq-len");
}

}  // namespace fanout::train
