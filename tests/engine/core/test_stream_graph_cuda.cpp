// GPU: stream graphs on a CUDA stream (Note [Stream graphs]): a CUDA graph
// recorded from flat ops replays them with the values of each launch's moment;
// what a recording cannot hold fails it with the reason and leaves the stream
// and the device working; memory freed on another thread while a stream records
// is fenced without touching the recording.

#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "tests/engine/core/stream_graph_test_util.h"

using namespace fanout;
using fanout::test::end_failure;

TEST_CASE("a CUDA graph replays flat ops with the buffers' values at each launch") {
  const Device dev = cuda_device(0);
  Stream s(dev, "cuda:0 compute");
  Tensor x = tensor_from_vector(s, std::vector<float>{1, 2, 3, 4}, {4}, DType::f32, dev);
  Tensor y = tensor_from_vector(s, std::vector<float>{0, 0, 0, 0}, {4}, DType::f32, dev);
  s.synchronize();
  s.begin_capture();
  flat_add(s, y, x);  // y += x
  flat_scale(s, x, 2.0f);
  auto g = s.end_capture();
  CHECK(tensor_to_vector<float>(s, y) == std::vector<float>{0, 0, 0, 0});  // not run yet
  g->launch(s);
  g->launch(s);
  flat_fill(s, x, 1.0f);
  g->launch(s);
  // y = x + 2x + 1, x = 2 after the last launch.
  CHECK(tensor_to_vector<float>(s, y) == std::vector<float>{4, 7, 10, 13});
  CHECK(tensor_to_vector<float>(s, x) == std::vector<float>{2, 2, 2, 2});
  // Destroyed right after a launch: the launch finishes first.
  g->launch(s);
  g.reset();  // y += 2, x = 4
  CHECK(tensor_to_vector<float>(s, y) == std::vector<float>{6, 9, 12, 15});
  CHECK(tensor_to_vector<float>(s, x) == std::vector<float>{4, 4, 4, 4});
}

TEST_CASE("a CUDA recording that waits, or allocates, fails and leaves the stream working") {
  const Device dev = cuda_device(0);
  Stream s(dev, "cuda:0 compute");
  Tensor x = Tensor::empty({64}, DType::f32, dev);
  SUBCASE("a wait for the stream") {
    s.begin_capture();
    flat_fill(s, x, 3.0f);
    CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("waiting for the stream"), Error);
    CHECK(end_failure(s).find("the graph was not recorded") != std::string::npos);
  }
  SUBCASE("an allocation") {
    s.begin_capture();
    CHECK_THROWS_AS(Tensor::empty({64}, DType::f32, dev), Error);
    CHECK(end_failure(s).find("it allocates 256 B of other on cuda:0") != std::string::npos);
  }
  SUBCASE("an abort") {
    s.begin_capture();
    flat_fill(s, x, 3.0f);
    s.abort_capture();
  }
  CHECK_FALSE(s.capturing());
  flat_fill(s, x, 5.0f);
  CHECK(tensor_to_vector<float>(s, x) == std::vector<float>(64, 5.0f));
}

TEST_CASE("memory freed on another thread while a CUDA stream records is fenced past it") {
  const Device dev = cuda_device(0);
  Stream s(dev, "cuda:0 compute"), other(dev, "cuda:0 other");
  Tensor x = Tensor::empty({1024}, DType::f32, dev);
  flat_fill(s, x, 0.0f);
  s.synchronize();
  s.begin_capture();
  flat_add(s, x, x);
  std::thread t([&] {
    for (int i = 0; i < 8; ++i) {
      Tensor tmp = Tensor::empty({4096}, DType::f32, dev);
      flat_fill(other, tmp, 1.0f);
      other.synchronize();
    }  // each free fences every live stream but the recording one
  });
  t.join();
  auto g = s.end_capture();  // the recording did not see the fences
  g->launch(s);
  s.synchronize();
  other.synchronize();
}
