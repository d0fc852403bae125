// GPU: the CUDA allocator and the device guards (Note [CUDA allocation ordering],
// Note [Device guards]). A free does not wait for queued work; a block freed while
// a kernel still writes it is not handed to another stream before that kernel ends;
// an out-of-memory allocation is one line and leaves no error behind for the next
// launch check; every CUDA call gives the thread its device back, and the flat
// kernels run on their stream's device whatever the calling thread's is.

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/cuda_runtime.h"
#include "engine/core/flat.h"
#include "engine/core/tensor.h"

using namespace fanout;

namespace {

// About `rounds` passes over `t` queued on `s`: long enough (tens of ms for a large
// t) that the host is still far ahead when the calls that follow return.
void queue_busy_work(Stream& s, const Tensor& t, int rounds, float value) {
  for (int r = 0; r < rounds; ++r) flat_fill(s, t, value);
}

int current_device() {
  int d = -1;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  return d;
}

}  // namespace

TEST_CASE("freeing a buffer does not wait for the work queued on the device") {
  Stream s(cuda_device(0), "cuda:0 compute");
  Tensor big = Tensor::empty({64 << 20}, DType::f32, cuda_device(0));  // 256 MiB
  Event done;
  {
    Tensor scratch = Tensor::empty({1 << 20}, DType::f32, cuda_device(0));
    flat_fill(s, scratch, 1.0f);
    queue_busy_work(s, big, 200, 2.0f);  // ~50 GB of writes: tens of ms at HBM speed
    done.record(s);
  }                           // scratch freed here, while `big` is still being filled
  CHECK_FALSE(done.query());  // the free returned before the queued work ran
  s.synchronize();
  CHECK(done.query());
}

TEST_CASE("a block freed under a running kernel is not lent to another stream too early") {
  Stream a(cuda_device(0), "cuda:0 a"), b(cuda_device(0), "cuda:0 b");
  const int64_t n = 32 << 20;  // 128 MiB, the same size both times
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    {
      Tensor first = Tensor::empty({n}, DType::f32, cuda_device(0));
      queue_busy_work(a, first, 100, 1.0f);  // still writing 1s when it is freed
    }
    Tensor second = Tensor::empty({n}, DType::f32, cuda_device(0));
    flat_fill(b, second, 2.0f);
    b.synchronize();
    a.synchronize();  // had the block been shared, a's later fills would show here
    std::vector<float> got = tensor_to_vector<float>(b, second);
    int64_t wrong = 0;
    for (float v : got) wrong += v != 2.0f;
    CHECK(wrong == 0);
  }
}

TEST_CASE("out of memory on cuda:0 is one line and leaves no error for the next launch") {
  Stream s(cuda_device(0), "cuda:0 compute");
  const size_t total = cuda_device_info(0).total_bytes;
  std::string what;
  try {
    Tensor t = Tensor::empty({static_cast<int64_t>(total / 2)}, DType::f32, cuda_device(0));
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(what.find("out of memory on cuda:0") != std::string::npos);
  CHECK(what.find('\n') == std::string::npos);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  // The device is still usable: a launch and its check succeed.
  Tensor small = Tensor::empty({1000}, DType::f32, cuda_device(0));
  flat_fill(s, small, 3.0f);
  CHECK(tensor_to_vector<float>(s, small)[999] == 3.0f);
  CHECK(allocator_for(cuda_device(0)).stats().total.live >= small.nbytes());
}

TEST_CASE("CUDA calls give the calling thread its device back") {
  const int n = cuda_device_count();
  if (n < 2) {
    MESSAGE("needs two GPUs, this machine has ", n);
    return;
  }
  std::thread([&] {
    cuda_set_device(1);  // a device thread of cuda:1
    {
      Stream other(cuda_device(0), "cuda:0 compute");
      CHECK(current_device() == 1);
      Tensor t = Tensor::empty({4096}, DType::f32, cuda_device(0));
      CHECK(current_device() == 1);
      flat_fill(other, t, 5.0f);  // launched on cuda:0's stream from a cuda:1 thread
      CHECK(current_device() == 1);
      Event e;
      e.record(other);
      CHECK(current_device() == 1);
      CHECK(tensor_to_vector<float>(other, t)[4095] == 5.0f);
    }
    CHECK(current_device() == 1);
  }).join();
}

TEST_CASE("flat kernels driven from one thread run on each stream's own device") {
  const int n = cuda_device_count();
  if (n < 2) {
    MESSAGE("needs two GPUs, this machine has ", n);
    return;
  }
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<Tensor> bufs;
  for (int d = 0; d < n; ++d) {
    streams.push_back(std::make_unique<Stream>(cuda_device(d), "cuda compute"));
    bufs.push_back(Tensor::empty({1 << 16}, DType::f32, cuda_device(d)));
  }
  for (int d = 0; d < n; ++d) {  // one thread, every device in turn, as unit stores do
    flat_fill(*streams[d], bufs[d], static_cast<float>(d + 1));
    flat_scale(*streams[d], bufs[d], 2.0f);
    flat_add(*streams[d], bufs[d], bufs[d]);
  }
  for (int d = 0; d < n; ++d) {
    CAPTURE(d);
    std::vector<float> got = tensor_to_vector<float>(*streams[d], bufs[d]);
    CHECK(got.front() == 4.0f * (d + 1));
    CHECK(got.back() == 4.0f * (d + 1));
  }
}
