#include "engine/parallel/shard_set.h"

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/data_parallel.h"

namespace fanout::parallel {

namespace {

class DataParallelShards final : public ShardSet {
 public:
  explicit DataParallelShards(DataParallel& dp) : dp_(dp), sh_(dp.shards()) {}

  int64_t num_params() const override { return dp_.primary().num_params(); }
  std::vector<ParamUnit> shards() const override {
    std::vector<ParamUnit> out;
    for (const auto& s : sh_) out.push_back({s.begin, s.end});
    return out;
  }
  Device shard_device(int i) const override { return dp_.replica(sh_[i].replica).device(); }
  Stream& shard_stream(int i) override { return dp_.replica(sh_[i].replica).compute_stream(); }
  Tensor shard_params(int i) override { return dp_.shard_params(sh_[i]); }
  Tensor shard_grads(int i) override { return dp_.shard_grads(sh_[i]); }
  Tensor shard_working(int i) override { return dp_.shard_working(sh_[i]); }
  double sum_over_shards(const std::function<double(int)>& partial) override {
    return dp_.sum_over_shards(
        [&](const DataParallel::Shard& s, Replica&) { return partial(index_of(s)); });
  }
  void update_shards(const std::function<bool(int)>& update) override {
    dp_.update_shards([&](const DataParallel::Shard& s, Replica&) { return update(index_of(s)); });
  }
  void shards_to_host(const std::vector<Tensor>& per_shard, float* out) override {
    dp_.shards_to_host(per_shard, out);
  }

 private:
  int index_of(const DataParallel::Shard& s) const {
    for (size_t i = 0; i < sh_.size(); ++i)
      if (sh_[i].replica == s.replica && sh_[i].begin == s.begin && sh_[i].end == s.end)
        return static_cast<int>(i);
    FANOUT_ASSERT(false, "no shard at ", s.begin, " on replica ", s.replica);
    return -1;
  }

  DataParallel& dp_;
  std::vector<DataParallel::Shard> sh_;
};

}  // namespace

void ShardSet::host_to_shards(const float* in, const std::vector<Tensor>& per_shard) {
  const std::vector<ParamUnit> sh = shards();
  FANOUT_ASSERT(per_shard.size() == sh.size(), "one tensor per shard");
  for (size_t i = 0; i < sh.size(); ++i) {
    if (sh[i].end <= sh[i].begin) continue;
    tensor_upload(shard_stream(static_cast<int>(i)),
                  per_shard[i].view(0, {sh[i].end - sh[i].begin}), in + sh[i].begin);
  }
}

std::vector<ParamUnit> ShardSet::shard_counted(int i) const {
  const ParamUnit u = shards()[i];
  return {{0, u.end - u.begin}};
}

std::unique_ptr<ShardSet> data_parallel_shards(DataParallel& dp) {
  return std::make_unique<DataParallelShards>(dp);
}

}  // namespace fanout::parallel
