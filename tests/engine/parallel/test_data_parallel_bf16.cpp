// Mixed precision in the engine: the N-devices-equal-one invariant under bf16 for
// every mode, bf16 tracking fp32, and --grad-comm bf16 (gradients sent in bf16,
// summed in fp32) against fp32 communication, with the bytes read from the
// engine's own counters.

#include <doctest/doctest.h>

#include <cmath>

#include "models/llama_layout.h"
#include "tests/engine/parallel/parallel_test_util.h"

using namespace fanout;
using namespace fanout::test;
using parallel::DataParallelOptions;
using parallel::Strategy;

namespace {

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// Tolerances of bf16 runs against each other. The replicas compute each row
// exactly as one device does, but the f32 sums over rows (weight gradients) run in
// another order, and a last-bit difference before a bf16 store moves that value by
// up to 2^-8: a few such flips per step are expected, not a drift.
void check_close(const RunResult& got, const RunResult& ref, double loss_tol, double grad_tol,
                 double update_tol) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(got.losses[s] - ref.losses[s]) <= loss_tol * std::abs(ref.losses[s]));
    CHECK(std::abs(got.grad_norms[s] - ref.grad_norms[s]) <= grad_tol * ref.grad_norms[s]);
  }
  CHECK(rel_l2(got.first_grads, ref.first_grads) <= grad_tol);
  auto du = difference(got.final_params, got.init_params);
  auto dr = difference(ref.final_params, ref.init_params);
  CHECK(norm(dr) > 0);  // the reference moved
  CHECK(rel_l2(du, dr) <= update_tol);
}

const RunResult& bf16_reference(const TestBatch& batch) {
  static RunResult ref = [&] {
    DataParallelOptions o;
    o.device_ids = {cpu_device(0)};
    return run_data_parallel(o, batch, 3, 7, DType::bf16);
  }();
  return ref;
}

TestBatch invariant_batch() {
  return make_batch(10, 8, 61, 11, {0, 3, 7, 1, 0, 5, 2, 8, 4, 6});
}

}  // namespace

TEST_CASE("bf16: every mode on 2 and 3 devices and on cpu:0,cpu:0 equals one bf16 device") {
  TestBatch batch = invariant_batch();
  const RunResult& ref = bf16_reference(batch);
  REQUIRE(ref.losses[2] < ref.losses[0]);
  for (const ParallelMode& m : kParallelModes) {
    for (const char* devices : {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:0"}) {
      CAPTURE(m.name);
      CAPTURE(devices);
      RunResult got = run_data_parallel(mode_options(m, devices), batch, 3, 7, DType::bf16);
      check_close(got, ref, 1e-4, 1e-3, 1e-2);
    }
  }
}

TEST_CASE("bf16: an uneven split with an idle replica equals one bf16 device") {
  TestBatch batch = make_batch(3, 8, 61, 12, {1, 0, 4});
  DataParallelOptions one;
  one.device_ids = {cpu_device(0)};
  RunResult ref = run_data_parallel(one, batch, 3, 7, DType::bf16);
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    RunResult got =
        run_data_parallel(mode_options(m, "cpu:0,cpu:1,cpu:2,cpu:3"), batch, 3, 7, DType::bf16);
    check_close(got, ref, 1e-4, 1e-3, 1e-2);
  }
}

TEST_CASE("bf16 training tracks fp32 and is not fp32 under another name") {
  TestBatch batch = invariant_batch();
  DataParallelOptions o;
  o.device_ids = {cpu_device(0)};
  RunResult f32 = run_data_parallel(o, batch, 3, 7, DType::f32);
  const RunResult& bf16 = bf16_reference(batch);
  // bf16 rounds every GEMM input: the loss moves by ~1e-3, not by 1e-7 ...
  CHECK(bf16.losses[0] != f32.losses[0]);
  CHECK(rel_l2(bf16.first_grads, f32.first_grads) > 1e-4);
  // ... and the training signal is the same one. AdamW divides by sqrt(v): where a
  // gradient is tiny its update is a ratio of two small rounded numbers, so the
  // updates agree less closely than the gradients do.
  check_close(bf16, f32, 1e-2, 5e-2, 1.5e-1);
  // Whatever the precision, the master weights stay fp32: updates smaller than
  // bf16's resolution of the weight are kept.
  int64_t below_bf16 = 0;
  for (size_t i = 0; i < bf16.final_params.size(); ++i) {
    float w = bf16.final_params[i];
    if (bf16_to_float(float_to_bf16(w)) != w) ++below_bf16;
  }
  CHECK(below_bf16 > static_cast<int64_t>(bf16.final_params.size() / 2));
}

TEST_CASE(
    "grad-comm bf16 equals fp32 communication within bf16 rounding and moves half the "
    "bytes") {
  TestBatch batch = invariant_batch();
  for (const ParallelMode& m : kParallelModes) {
    for (DType working : {DType::f32, DType::bf16}) {
      CAPTURE(m.name);
      CAPTURE(dtype_name(working));
      DataParallelOptions o32 = mode_options(m, "cpu:0,cpu:1,cpu:2");
      DataParallelOptions o16 = o32;
      o16.grad_comm = DType::bf16;
      RunResult a = run_data_parallel(o32, batch, 3, 7, working);
      RunResult b = run_data_parallel(o16, batch, 3, 7, working);
      // Each sender's gradients are rounded once (relative error <= 2^-9 each).
      double diff = rel_l2(b.first_grads, a.first_grads);
      CHECK(diff > 0);
      CHECK(diff <= 4e-3);
      check_close(b, a, 1e-3, 4e-3, 5e-2);
      // The sums moved exactly half the bytes; the weights sent to the replicas
      // did not change.
      CHECK(a.last_step_bytes.reduce > 0);
      CHECK(b.last_step_bytes.reduce * 2 == a.last_step_bytes.reduce);
      CHECK(b.last_step_bytes.replicate == a.last_step_bytes.replicate);
    }
  }
}

TEST_CASE("bf16 working weights halve the bytes sent to replicas after a step") {
  TestBatch batch = invariant_batch();
  models::LlamaLayout layout(small_test_config());
  const int64_t P = layout.total();
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    DataParallelOptions o = mode_options(m, "cpu:0,cpu:1,cpu:2");
    RunResult a = run_data_parallel(o, batch, 2, 7, DType::f32);
    RunResult b = run_data_parallel(o, batch, 2, 7, DType::bf16);
    // dp: the primary broadcasts P weights to 2 replicas; zero1, zero2: each
    // replica receives the 2/3 of the weights it does not own; zero3: the same for
    // every unit forward uses, and again for the layers backward uses (the head
    // stays from forward to backward). 4 bytes each in fp32, 2 in bf16.
    int64_t layers = 0;
    for (int64_t l = 0; l < small_test_config().num_hidden_layers; ++l)
      layers += layout.layer(l).end - layout.layer(l).begin;
    const int64_t sent = m.strategy == parallel::Strategy::zero3 ? 2 * (P + layers) : 2 * P;
    CHECK(a.last_step_bytes.replicate == sent * 4);
    CHECK(b.last_step_bytes.replicate == sent * 2);
    // Gradients are summed in fp32 whatever the working precision.
    CHECK(b.last_step_bytes.reduce == a.last_step_bytes.reduce);
  }
}

TEST_CASE("two replicas sharing a device move no bytes, in bf16 too") {
  TestBatch batch = make_batch(4, 8, 61, 16, {0, 1, 2, 3});
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    DataParallelOptions o = mode_options(m, "cpu:0,cpu:0");
    o.grad_comm = DType::bf16;
    RunResult r = run_data_parallel(o, batch, 2, 7, DType::bf16);
    CHECK(r.last_step_bytes.replicate == 0);
    CHECK(r.last_step_bytes.reduce == 0);
  }
}

TEST_CASE(
    "bf16 with the fused classifier: every mode on 2 devices equals one device, and the "
    "loss tracks the unfused path") {
  // Note [Fused classifier]: the logits are rounded to bf16 before the loss, so the
  // fused path is close to the unfused one, not equal; between device counts it is
  // the same computation split, as every other path.
  TestBatch batch = invariant_batch();
  DataParallelOptions one;
  one.device_ids = {cpu_device(0)};
  const RunResult ref = run_data_parallel(one, batch, 3, 7, DType::bf16, nullptr, true);
  const RunResult& unfused = bf16_reference(batch);
  REQUIRE(ref.losses[2] < ref.losses[0]);
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(ref.losses[s] == doctest::Approx(unfused.losses[s]).epsilon(2e-3));
  }
  CHECK(rel_l2(ref.first_grads, unfused.first_grads) <= 2e-2);
  CHECK(ref.losses[0] != unfused.losses[0]);  // the fused path really ran
  for (const ParallelMode& m : kParallelModes) {
    CAPTURE(m.name);
    RunResult got =
        run_data_parallel(mode_options(m, "cpu:0,cpu:1"), batch, 3, 7, DType::bf16, nullptr, true);
    check_close(got, ref, 1e-4, 1e-3, 1e-2);
  }
}
