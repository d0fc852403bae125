// Parity with the PyTorch reference (tests/reference/llama_ref.py, run with
// Debian's /usr/bin/python3): logits, loss and every gradient on a random tiny
// model; checkpoints moving both ways (F32, BF16, tied embeddings); parameter
// counts.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/llama_checkpoint.h"
#include "models/safetensors.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/models/llama_test_util.h"

using namespace fanout;
using namespace fanout::models;

namespace {
namespace fs = std::filesystem;

LlamaConfig tiny(bool tied) {
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 2;  // keeps the reference quick; every op still appears
  c.tie_word_embeddings = tied;
  return c;
}

struct Batch {
  int64_t B = 3, T = 24;
  std::vector<int32_t> inputs, targets;
};

// Random bytes; row 2 right-padded (its last 9 targets ignored).
Batch make_batch(int64_t vocab) {
  Batch b;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  for (int64_t r = 0; r < b.B; ++r) {
    for (int64_t t = 0; t < b.T; ++t) {
      b.inputs.push_back(tok(rng));
      b.targets.push_back(r == 2 && t >= b.T - 9 ? kIgnoreIndex : tok(rng));
    }
  }
  return b;
}

void write_batch(const Batch& b, const std::string& path) {
  safetensors_write(path, {{"input_ids", DType::i32, {b.B, b.T}, b.inputs.data()},
                           {"targets", DType::i32, {b.B, b.T}, b.targets.data()}});
}

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsEntry* e = f.find(name);
  REQUIRE_MESSAGE(e != nullptr, name);
  std::vector<float> v(static_cast<size_t>(shape_numel(e->shape)));
  f.read_f32(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

struct Ours {
  std::vector<float> logits, grads;
  double loss;
};

Ours run_fanout(LlamaModel& m, const Batch& b) {
  Stream& s = m.compute_stream();
  Tensor in = tensor_from_vector(s, b.inputs, {b.B, b.T}, DType::i32, m.device());
  Tensor tg = tensor_from_vector(s, b.targets, {b.B, b.T}, DType::i32, m.device());
  Ours o;
  o.logits = tensor_to_vector<float>(s, m.forward_logits(in));
  Tensor stats = Tensor::empty({2}, DType::f32, m.device());
  m.zero_grads();
  m.forward_loss(in, tg, stats, kIgnoreIndex);
  auto st = tensor_to_vector<float>(s, stats);
  m.backward_from_loss(st[1]);
  o.loss = st[0] / st[1];
  o.grads = tensor_to_vector<float>(s, m.grads());
  return o;
}

// max |a - b| <= rtol * max |b|, and the reference is not all zeros.
void check_close(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                 const std::string& what) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  INFO(what << ": max abs error " << worst << " against max |ref| " << scale);
  CHECK(scale > 0);
  CHECK(worst <= rtol * scale);
}
}  // namespace

TEST_CASE("parity: logits and loss and every gradient match PyTorch on a random tiny model") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    std::string dir = test::make_temp_dir("fanout-parity");
    LlamaConfig c = tiny(tied);
    llama_config_save(c, dir + "/config.json");
    test::run_reference_script(
        "llama_ref.py", "init --config " + dir + "/config.json --seed 3 --out " + dir + "/ckpt",
        dir);
    Batch b = make_batch(c.vocab_size);
    write_batch(b, dir + "/batch.safetensors");
    test::run_reference_script("llama_ref.py",
                               "forward --checkpoint " + dir + "/ckpt --batch " + dir +
                                   "/batch.safetensors --out " + dir + "/out.safetensors",
                               dir);
    SafetensorsFile ref = SafetensorsFile::open(dir + "/out.safetensors");
    auto model = llama_load(dir + "/ckpt", cpu_device(0));
    Ours ours = run_fanout(*model, b);
    check_close(ours.logits, read_all(ref, "logits"), 1e-4, "logits");
    double ref_loss = read_all(ref, "loss")[0];
    CHECK(std::abs(ours.loss - ref_loss) <= 1e-4 * ref_loss);
    for (const ParamInfo& p : model->layout().params()) {
      std::vector<float> g(ours.grads.begin() + p.offset, ours.grads.begin() + p.offset + p.numel);
      check_close(g, read_all(ref, "grad." + p.name), 1e-4, p.name);
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("parity: a checkpoint fanout writes gives PyTorch the same loss") {
  std::string dir = test::make_temp_dir("fanout-parity");
  LlamaConfig c = tiny(false);
  LlamaModel model(c, cpu_device(0));
  model.init_random(11);
  fs::create_directories(dir + "/ckpt");
  llama_save(model, dir + "/ckpt");
  Batch b = make_batch(c.vocab_size);
  write_batch(b, dir + "/batch.safetensors");
  test::run_reference_script("llama_ref.py",
                             "forward --checkpoint " + dir + "/ckpt --batch " + dir +
                                 "/batch.safetensors --out " + dir + "/out.safetensors",
                             dir);
  Ours ours = run_fanout(model, b);
  double ref_loss = read_all(SafetensorsFile::open(dir + "/out.safetensors"), "loss")[0];
  CHECK(std::abs(ours.loss - ref_loss) <= 1e-4 * ref_loss);
  fs::remove_all(dir);
}

TEST_CASE(
    "parity: tied and bf16 checkpoints written by PyTorch load in fanout with the same loss") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    std::string dir = test::make_temp_dir("fanout-parity");
    LlamaConfig c = tiny(tied);
    llama_config_save(c, dir + "/config.json");
    test::run_reference_script(
        "llama_ref.py",
        "init --config " + dir + "/config.json --seed 4 --dtype bf16 --out " + dir + "/ckpt", dir);
    SafetensorsFile written = SafetensorsFile::open(dir + "/ckpt/model.safetensors");
    CHECK(written.find("model.embed_tokens.weight")->dtype == "BF16");
    CHECK((written.find("lm_head.weight") == nullptr) == tied);
    Batch b = make_batch(c.vocab_size);
    write_batch(b, dir + "/batch.safetensors");
    test::run_reference_script("llama_ref.py",
                               "forward --checkpoint " + dir + "/ckpt --batch " + dir +
                                   "/batch.safetensors --out " + dir + "/out.safetensors",
                               dir);
    auto model = llama_load(dir + "/ckpt", cpu_device(0));
    CHECK(model->config().tie_word_embeddings == tied);
    Ours ours = run_fanout(*model, b);
    double ref_loss = read_all(SafetensorsFile::open(dir + "/out.safetensors"), "loss")[0];
    CHECK(std::abs(ours.loss - ref_loss) <= 1e-4 * ref_loss);
    fs::remove_all(dir);
  }
}

TEST_CASE("parity: the seed preset's parameter count matches PyTorch's") {
  std::string dir = test::make_temp_dir("fanout-parity");
  std::string out = test::run_reference_script("llama_ref.py", "count --config seed", dir);
  long long ref = std::stoll(out);
  LlamaConfig seed = llama_preset("seed");
  CHECK(seed.num_parameters() == ref);
  CHECK(LlamaLayout(seed).total() == ref);
  MESSAGE("seed preset: " << ref << " parameters");
  fs::remove_all(dir);
}
