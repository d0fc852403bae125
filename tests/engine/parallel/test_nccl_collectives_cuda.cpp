// GPU: NcclCollectives between distinct GPUs (up to four) against plain host sums:
// broadcast, all-reduce, and reduce-scatter / all-gather over uneven shards (one of
// a single element, one empty), on sub-ranges, from small integers so every
// comparison is exact; bf16 sums (--grad-comm bf16) against the local collectives,
// bit for bit. Each case returns early, after a MESSAGE saying why, on a
// machine with fewer than two GPUs or a build without NCCL.

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/cuda_runtime.h"
#include "engine/parallel/collectives/collectives.h"

using namespace fanout;

namespace {

// The GPUs, a stream on each, and NCCL between them.
struct Gpus {
  std::vector<Device> devices;
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> streams;
  std::unique_ptr<parallel::Collectives> nccl;
  int ranks() const { return static_cast<int>(devices.size()); }
};

// Null, after a MESSAGE, where this machine or build cannot run the case.
std::unique_ptr<Gpus> gpus_or_skip() {
  int count = cuda_device_count();
  if (count < 2) {
    std::string why = "skipped: NCCL collectives need two distinct GPUs; this machine has " +
                      std::to_string(count);
    MESSAGE(why);
    return nullptr;
  }
  auto g = std::make_unique<Gpus>();
  for (int i = 0; i < std::min(count, 4); ++i) {
    g->devices.push_back(cuda_device(i));
    g->owned.push_back(std::make_unique<Stream>(cuda_device(i), "cuda:" + std::to_string(i)));
    g->streams.push_back(g->owned.back().get());
  }
  g->nccl = parallel::make_collectives(g->devices);
  if (std::string(g->nccl->name()) != "nccl") {
    std::string why = "skipped: this build has no NCCL (make_collectives chose " +
                      std::string(g->nccl->name()) + ")";
    MESSAGE(why);
    return nullptr;
  }
  return g;
}

// Rank r's starting values: small integers, different on every rank.
std::vector<float> values_of(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + r * 3) % 11 - 5);
  return v;
}

std::vector<Tensor> upload(Gpus& g, const std::vector<std::vector<float>>& per_rank) {
  std::vector<Tensor> bufs;
  for (int r = 0; r < g.ranks(); ++r) {
    auto n = static_cast<int64_t>(per_rank[r].size());
    bufs.push_back(tensor_from_vector(*g.streams[r], per_rank[r], {n}, DType::f32, g.devices[r]));
  }
  return bufs;
}

std::vector<std::vector<float>> download(Gpus& g, const std::vector<Tensor>& bufs) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < g.ranks(); ++r)
    out.push_back(tensor_to_vector<float>(*g.streams[r], bufs[r]));
  return out;
}

// Uneven shards over the ranks: the first of one element, the second empty from
// three ranks on, the others of different sizes.
std::vector<int64_t> uneven_bounds(int ranks) {
  std::vector<int64_t> b = {0};
  for (int q = 0; q < ranks; ++q) {
    int64_t size = q == 0 ? 1 : (q == 1 && ranks >= 3) ? 0 : 100 + 37 * q;
    b.push_back(b.back() + size);
  }
  return b;
}

}  // namespace

TEST_CASE("NCCL broadcast copies the root's range to every GPU and leaves the rest") {
  std::unique_ptr<Gpus> g = gpus_or_skip();
  if (!g) return;
  const int64_t n = 1001, begin = 3, end = n - 2;
  const int root = g->ranks() - 1;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < g->ranks(); ++r) in.push_back(values_of(r, n));
  std::vector<Tensor> bufs = upload(*g, in);
  g->nccl->broadcast(bufs, g->streams, root, begin, end);
  std::vector<std::vector<float>> out = download(*g, bufs);
  for (int r = 0; r < g->ranks(); ++r) {
    CAPTURE(r);
    std::vector<float> want = in[r];
    std::copy(in[root].begin() + begin, in[root].begin() + end, want.begin() + begin);
    CHECK(out[r] == want);
  }
}

TEST_CASE("NCCL all-reduce gives every GPU the host sum of the range") {
  std::unique_ptr<Gpus> g = gpus_or_skip();
  if (!g) return;
  for (int64_t n : {int64_t{1}, int64_t{257}, int64_t{100003}}) {
    CAPTURE(n);
    const int64_t begin = n > 1 ? 1 : 0;
    std::vector<std::vector<float>> in;
    for (int r = 0; r < g->ranks(); ++r) in.push_back(values_of(r, n));
    std::vector<Tensor> bufs = upload(*g, in);
    g->nccl->all_reduce(bufs, g->streams, begin, n);
    std::vector<std::vector<float>> out = download(*g, bufs);
    std::vector<float> sum(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < g->ranks(); ++r)
      for (int64_t i = 0; i < n; ++i) sum[i] += in[r][i];
    bool nonzero = false;
    for (int r = 0; r < g->ranks(); ++r) {
      CAPTURE(r);
      std::vector<float> want = in[r];
      std::copy(sum.begin() + begin, sum.end(), want.begin() + begin);
      for (int64_t i = begin; i < n; ++i) nonzero |= want[i] != 0;
      CHECK(out[r] == want);
    }
    CHECK(nonzero);  // comparing zeros would prove nothing
  }
}

TEST_CASE("NCCL reduce-scatter over uneven shards gives each GPU the sum of its shard") {
  std::unique_ptr<Gpus> g = gpus_or_skip();
  if (!g) return;
  const std::vector<int64_t> bounds = uneven_bounds(g->ranks());
  const int64_t n = bounds.back(), begin = 0, end = n - 3;  // the last shard cut short
  std::vector<std::vector<float>> in;
  for (int r = 0; r < g->ranks(); ++r) in.push_back(values_of(r, n));
  std::vector<Tensor> bufs = upload(*g, in);
  g->nccl->reduce_scatter(bufs, g->streams, bounds, begin, end);
  std::vector<std::vector<float>> out = download(*g, bufs);
  bool nonzero = false;
  for (int q = 0; q < g->ranks(); ++q) {
    CAPTURE(q);
    int64_t lo = std::max(begin, bounds[q]), hi = std::min(end, bounds[q + 1]);
    bool ok = true;
    for (int64_t i = lo; i < hi; ++i) {
      float sum = 0;
      for (int r = 0; r < g->ranks(); ++r) sum += in[r][i];
      ok &= out[q][i] == sum;
      nonzero |= sum != 0;
    }
    CHECK(ok);
    // Outside the range every GPU's buffer is as it was.
    CHECK(std::equal(out[q].begin() + end, out[q].end(), in[q].begin() + end));
  }
  CHECK(nonzero);  // comparing zeros would prove nothing
}

TEST_CASE("NCCL all-gather over uneven shards gives every GPU each owner's values") {
  std::unique_ptr<Gpus> g = gpus_or_skip();
  if (!g) return;
  const std::vector<int64_t> bounds = uneven_bounds(g->ranks());
  const int64_t n = bounds.back(), begin = 0, end = n - 3;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < g->ranks(); ++r) in.push_back(values_of(r, n));
  std::vector<float> want(static_cast<size_t>(n));
  for (int q = 0; q < g->ranks(); ++q)
    for (int64_t i = bounds[q]; i < bounds[q + 1]; ++i) want[i] = in[q][i];

  SUBCASE("f32") {
    std::vector<Tensor> bufs = upload(*g, in);
    g->nccl->all_gather(bufs, g->streams, bounds, begin, end);
    std::vector<std::vector<float>> out = download(*g, bufs);
    for (int r = 0; r < g->ranks(); ++r) {
      CAPTURE(r);
      std::vector<float> expect = want;
      std::copy(in[r].begin() + end, in[r].end(), expect.begin() + end);
      CHECK(out[r] == expect);
    }
  }
  SUBCASE("bf16, moved as it is") {
    std::vector<Tensor> bufs;
    std::vector<std::vector<uint16_t>> bits(g->ranks());
    for (int r = 0; r < g->ranks(); ++r) {
      for (float v : in[r]) bits[r].push_back(float_to_bf16(v));
      bufs.push_back(tensor_from_vector(*g->streams[r], bits[r], {n}, DType::bf16, g->devices[r]));
    }
    g->nccl->all_gather(bufs, g->streams, bounds, begin, end);
    for (int r = 0; r < g->ranks(); ++r) {
      CAPTURE(r);
      std::vector<uint16_t> out = tensor_to_vector<uint16_t>(*g->streams[r], bufs[r]);
      std::vector<uint16_t> expect;
      for (float v : want) expect.push_back(float_to_bf16(v));
      std::copy(bits[r].begin() + end, bits[r].end(), expect.begin() + end);
      CHECK(out == expect);
    }
  }
}

TEST_CASE("NCCL bf16 sums give the local collectives' bits and move their bytes") {
  // Note [bf16 sums over NCCL]: bf16 on the wire, the sums in fp32 in rank order,
  // as LocalCollectives does them on the same GPUs.
  std::unique_ptr<Gpus> g = gpus_or_skip();
  if (!g) return;
  std::unique_ptr<parallel::Collectives> local = parallel::make_local_collectives();
  g->nccl->set_sum_dtype(DType::bf16);
  local->set_sum_dtype(DType::bf16);
  const std::vector<int64_t> bounds = uneven_bounds(g->ranks());
  const int64_t n = bounds.back(), begin = 1, end = n - 3;
  // Values bf16 cannot hold, so every rounding shows.
  std::vector<std::vector<float>> in;
  for (int r = 0; r < g->ranks(); ++r) {
    std::vector<float> v = values_of(r, n);
    for (int64_t i = 0; i < n; ++i) v[i] += static_cast<float>((i * 131 + r * 17) % 1009) / 1009.0f;
    in.push_back(v);
  }
  auto run = [&](const char* what, auto&& op) {
    CAPTURE(what);
    std::vector<Tensor> via_nccl = upload(*g, in), via_local = upload(*g, in);
    g->nccl->reset_bytes_moved();
    local->reset_bytes_moved();
    op(*g->nccl, via_nccl);
    op(*local, via_local);
    std::vector<std::vector<float>> got = download(*g, via_nccl), want = download(*g, via_local);
    bool rounded = false;  // some element is not the plain fp32 sum
    for (int r = 0; r < g->ranks(); ++r) {
      CAPTURE(r);
      CHECK(got[r] == want[r]);
      for (int64_t i = begin; i < end; ++i) {
        float sum = 0;
        for (int q = 0; q < g->ranks(); ++q) sum += in[q][i];
        rounded |= got[r][i] != sum && got[r][i] != in[r][i];
      }
    }
    CHECK(rounded);
    CHECK(g->nccl->bytes_moved() == local->bytes_moved());
  };
  run("reduce", [&](parallel::Collectives& c, const std::vector<Tensor>& bufs) {
    c.reduce(bufs, g->streams, g->ranks() - 1, begin, end);
  });
  run("all-reduce", [&](parallel::Collectives& c, const std::vector<Tensor>& bufs) {
    c.all_reduce(bufs, g->streams, begin, end);
  });
  run("reduce-scatter", [&](parallel::Collectives& c, const std::vector<Tensor>& bufs) {
    c.reduce_scatter(bufs, g->streams, bounds, begin, end);
  });
}
