// Llama 3.1/3.2 rope_scaling ("llama3") against the PyTorch reference
// (tests/reference/llama3_rope_ref.py: HF's _compute_llama3_parameters restated in
// torch, run with Debian's /usr/bin/python3): the inverse frequencies, the RoPE op
// forward and backward, and a tiny model's logits, loss and every gradient.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "models/llama_checkpoint.h"
#include "models/rope_scaling.h"
#include "models/safetensors.h"
#include "ops/rope.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::models;

namespace {
namespace fs = std::filesystem;

// The tiny preset, 2 layers, with Llama 3.1's rope_scaling but an original context
// of 64, so that its 16 frequency pairs fall in all three bands (2 kept, 3 blended,
// 11 divided by 8).
LlamaConfig scaled_config() {
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 2;
  c.rope_scaling = {ops::RopeScalingType::llama3, 8.0, 1.0, 4.0, 64};
  return c;
}

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsEntry* e = f.find(name);
  REQUIRE_MESSAGE(e != nullptr, name);
  std::vector<float> v(static_cast<size_t>(shape_numel(e->shape)));
  f.read_f32(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

// max |a - b|, and max |b| (which must not be 0).
struct Diff {
  double worst = 0, scale = 0;
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    d.worst = std::max(d.worst, std::abs(double(a[i]) - b[i]));
    d.scale = std::max(d.scale, std::abs(double(b[i])));
  }
  return d;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("llama3 parity: inv_freq equals HF's _compute_llama3_parameters (and linear's)") {
  std::string dir = test::make_temp_dir("fanout-llama3");
  for (LlamaConfig c : {scaled_config(),
                        [] {
                          LlamaConfig l = scaled_config();  // Llama 3.1 8B's numbers
                          l.rope_theta = 500000.0, l.head_dim = 128;
                          l.num_attention_heads = 1, l.num_key_value_heads = 1;
                          l.rope_scaling.original_max_position_embeddings = 8192;
                          return l;
                        }(),
                        [] {
                          LlamaConfig l = scaled_config();
                          l.rope_scaling = {ops::RopeScalingType::linear, 4.0};
                          return l;
                        }()}) {
    CAPTURE(c.head_dim);
    CAPTURE(rope_scaling_name(c.rope_scaling.type));
    llama_config_save(c, dir + "/config.json");
    test::run_reference_script("llama3_rope_ref.py",
                               "inv-freq --config " + dir + "/config.json --out " + dir + "/f.json",
                               dir);
    std::ifstream in(dir + "/f.json");
    nlohmann::json ref = nlohmann::json::parse(in);
    REQUIRE(ref["rope_type"] == rope_scaling_name(c.rope_scaling.type));
    const auto f64 = ref["inv_freq_f64"].get<std::vector<double>>();
    const auto f32 = ref["inv_freq_f32"].get<std::vector<double>>();
    REQUIRE(static_cast<int64_t>(f64.size()) == c.head_dim / 2);
    double worst64 = 0, worst32 = 0, changed = 0;
    for (int64_t i = 0; i < c.head_dim / 2; ++i) {
      const double ours = ops::rope_inv_freq(c.rope(), i, c.head_dim);
      worst64 = std::max(worst64, std::abs(ours - f64[i]) / f64[i]);
      worst32 = std::max(worst32, std::abs(ours - f32[i]) / f32[i]);
      changed = std::max(changed,
                         std::abs(ours - ops::rope_inv_freq(c.rope_theta, i, c.head_dim)) / f64[i]);
    }
    MESSAGE(std::string(rope_scaling_name(c.rope_scaling.type))
            << " inv_freq (D " << c.head_dim << "): max relative difference " << worst64
            << " vs HF in float64, " << worst32 << " vs HF's float32");
    CHECK(worst64 <= 1e-14);
    CHECK(worst32 <= 1e-6);  // HF computes in float32
    CHECK(changed >= 1.0);   // the scaling moved some frequency by 4x or 8x
  }
  fs::remove_all(dir);
}

TEST_CASE("llama3 parity: the RoPE op's forward and backward equal torch autograd") {
  std::string dir = test::make_temp_dir("fanout-llama3");
  LlamaConfig c = scaled_config();
  llama_config_save(c, dir + "/config.json");
  const int64_t B = 2, T = 9, H = 3, D = c.head_dim;
  const int64_t n = B * T * H * D;
  const auto x = random_floats(n, 1), dy = random_floats(n, 2);
  safetensors_write(dir + "/in.safetensors", {{"x", DType::f32, {B, T, H, D}, x.data()},
                                              {"dy", DType::f32, {B, T, H, D}, dy.data()}});
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t pos : {0, 100}) {
    CAPTURE(pos);
    test::run_reference_script("llama3_rope_ref.py",
                               "rope --config " + dir + "/config.json --input " + dir +
                                   "/in.safetensors --pos-offset " + std::to_string(pos) +
                                   " --out " + dir + "/out.safetensors",
                               dir);
    SafetensorsFile ref = SafetensorsFile::open(dir + "/out.safetensors");
    Tensor tx = tensor_from_vector(s, x, {B, T, H, D}, DType::f32, cpu_device(0));
    Tensor tdy = tensor_from_vector(s, dy, {B, T, H, D}, DType::f32, cpu_device(0));
    ops::rope_forward(s, tx, tx, B, T, H, D, c.rope(), pos);
    ops::rope_backward(s, tdy, tdy, B, T, H, D, c.rope(), pos);
    const Diff fy = diff(tensor_to_vector<float>(s, tx), read_all(ref, "y"));
    const Diff fdx = diff(tensor_to_vector<float>(s, tdy), read_all(ref, "dx"));
    MESSAGE("rope op at positions " << pos << "..: max abs difference forward " << fy.worst
                                    << ", backward " << fdx.worst << " (max |ref| " << fy.scale
                                    << ")");
    CHECK(fy.scale > 1);
    CHECK(fy.worst <= 2e-6);
    CHECK(fdx.worst <= 2e-6);
    // Plain RoPE is far from the reference: the test sees the scaling.
    Tensor plain = tensor_from_vector(s, x, {B, T, H, D}, DType::f32, cpu_device(0));
    ops::rope_forward(s, plain, plain, B, T, H, D, c.rope_theta, pos);
    if (pos > 0) CHECK(diff(tensor_to_vector<float>(s, plain), read_all(ref, "y")).worst > 0.1);
  }
  fs::remove_all(dir);
}

TEST_CASE("llama3 parity: logits, loss and every gradient match PyTorch on a tiny model") {
  std::string dir = test::make_temp_dir("fanout-llama3");
  LlamaConfig c = scaled_config();
  LlamaModel model(c, cpu_device(0));
  test::init_scaled(model, 7, 5.0f);
  fs::create_directories(dir + "/ckpt");
  llama_save(model, dir + "/ckpt");  // config.json carries rope_scaling to the reference
  const int64_t B = 2, T = 40;       // positions past the original context of 64 / 4
  std::vector<int32_t> inputs(B * T), targets(B * T);
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
  for (auto& t : inputs) t = tok(rng);
  for (auto& t : targets) t = tok(rng);
  safetensors_write(dir + "/batch.safetensors", {{"input_ids", DType::i32, {B, T}, inputs.data()},
                                                 {"targets", DType::i32, {B, T}, targets.data()}});
  test::run_reference_script("llama3_rope_ref.py",
                             "forward --checkpoint " + dir + "/ckpt --batch " + dir +
                                 "/batch.safetensors --out " + dir + "/out.safetensors",
                             dir);
  SafetensorsFile ref = SafetensorsFile::open(dir + "/out.safetensors");

  auto loaded = llama_load(dir + "/ckpt", cpu_device(0));
  REQUIRE(loaded->config().rope_scaling.type == ops::RopeScalingType::llama3);
  Stream& s = loaded->compute_stream();
  Tensor in = tensor_from_vector(s, inputs, {B, T}, DType::i32, loaded->device());
  Tensor tg = tensor_from_vector(s, targets, {B, T}, DType::i32, loaded->device());
  const std::vector<float> logits = tensor_to_vector<float>(s, loaded->forward_logits(in));
  Tensor stats = Tensor::empty({2}, DType::f32, loaded->device());
  loaded->zero_grads();
  loaded->forward_loss(in, tg, stats, kIgnoreIndex);
  const auto st = tensor_to_vector<float>(s, stats);
  loaded->backward_from_loss(st[1]);
  const std::vector<float> grads = tensor_to_vector<float>(s, loaded->grads());

  const Diff dl = diff(logits, read_all(ref, "logits"));
  const double loss = st[0] / st[1], ref_loss = read_all(ref, "loss")[0];
  double worst_grad = 0;
  for (const ParamInfo& p : loaded->layout().params()) {
    CAPTURE(p.name);
    const std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
    const Diff dg = diff(g, read_all(ref, "grad." + p.name));
    CHECK(dg.scale > 0);
    CHECK(dg.worst <= 1e-4 * dg.scale);
    worst_grad = std::max(worst_grad, dg.worst / dg.scale);
  }
  MESSAGE("llama3 model: logits max abs difference "
          << dl.worst << " (max |ref| " << dl.scale << "), loss " << loss << " vs " << ref_loss
          << ", worst gradient relative difference " << worst_grad);
  CHECK(dl.worst <= 1e-4 * dl.scale);
  CHECK(std::abs(loss - ref_loss) <= 1e-5 * ref_loss);

  // The same weights with plain RoPE are measurably off the reference.
  LlamaConfig plain = c;
  plain.rope_scaling = {};
  LlamaModel unscaled(plain, cpu_device(0));
  test::init_scaled(unscaled, 7, 5.0f);
  Tensor in2 =
      tensor_from_vector(unscaled.compute_stream(), inputs, {B, T}, DType::i32, unscaled.device());
  const Diff off =
      diff(tensor_to_vector<float>(unscaled.compute_stream(), unscaled.forward_logits(in2)),
           read_all(ref, "logits"));
  MESSAGE("plain RoPE on the same weights: logits max abs difference " << off.worst);
  CHECK(off.worst > 100 * dl.worst);
  CHECK(off.worst > 1e-2 * dl.scale);
  fs::remove_all(dir);
}
