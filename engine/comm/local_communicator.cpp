// LocalCommunicator: the members are devices of this process, each used from its
// own thread. An exchange is two meetings of the members: at the first each has
// posted its outgoing pieces, then every member copies the pieces meant for it
// into its own buffers (tensor_copy on its stream: memcpy between CPU devices, a
// host or peer copy for GPUs), and at the second all copies are done, so no member
// changes a buffer another still reads. A meeting a member misses for timeout_s
// fails the group, naming the members that never came.

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/comm/communicator.h"
#include "engine/core/check.h"

namespace fanout::comm {

namespace {

class LocalGroup {
 public:
  LocalGroup(int size, double timeout_s)
      : size_(size),
        timeout_(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))),
        posted_(size),
        here_(size, false) {}

  int size() const { return size_; }

  // Member `rank`'s outgoing pieces; read by the others until the next meeting.
  void post(int rank, const std::vector<Tensor>& sends) {
    std::lock_guard<std::mutex> lock(mu_);
    posted_[rank] = sends;
  }
  const Tensor& posted(int from, int to) const { return posted_[from][to]; }

  // Returns once every member came to this meeting; throws fanout::Error when one
  // has not within the timeout, or the group failed before.
  void meet(int rank) {
    std::unique_lock<std::mutex> lock(mu_);
    FANOUT_CHECK(failure_.empty(), failure_);
    const int64_t generation = generation_;
    here_[rank] = true;
    if (++arrived_ == size_) {
      arrived_ = 0;
      here_.assign(size_, false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || !failure_.empty(); });
    if (generation_ != generation) return;
    if (failure_.empty()) {
      std::string missing;
      for (int q = 0; q < size_; ++q)
        if (!here_[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      failure_ = detail::str_cat("local communicator: member ", rank, " waited ",
                                 timeout_.count() / 1000.0, " s for member(s) ", missing,
                                 ", which never reached the collective");
      cv_.notify_all();
    }
    detail::throw_error(failure_);
  }

  // A member's own failure ends the group: the others stop waiting for it.
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = why;
    cv_.notify_all();
  }

 private:
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Tensor>> posted_;
  std::vector<bool> here_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  std::string failure_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, Device device)
      : Communicator(rank, group->size(), device), group_(std::move(group)) {}
  const char* backend() const override { return "local"; }

 protected:
  void exchange(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) override {
    group_->post(rank(), sends);
    group_->meet(rank());
    try {
      for (int j = 0; j < size(); ++j) {
        if (j == rank() || !recvs[j].defined() || recvs[j].numel() == 0) continue;
        const Tensor& from = group_->posted(j, rank());
        FANOUT_ASSERT(from.defined() && from.numel() == recvs[j].numel(), "member ", j, " sends ",
                      from.str(), " for ", recvs[j].str());
        tensor_copy(stream(), recvs[j], from);
      }
      stream().synchronize();
    } catch (const std::exception& e) {
      group_->fail(detail::str_cat("local communicator: member ", rank(), " failed: ", e.what()));
      throw;
    }
    group_->meet(rank());
  }

 private:
  std::shared_ptr<LocalGroup> group_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_communicators(
    const std::vector<Device>& devices, double timeout_s) {
  FANOUT_CHECK(!devices.empty(), "a local communicator needs at least one device");
  FANOUT_CHECK(timeout_s > 0, "the communicator's timeout must be positive, got ", timeout_s, " s");
  for (const Device& d : devices)
    FANOUT_CHECK(!d.is_bare(), "local communicator devices must be concrete (cpu:0, cuda:1), got ",
                 d.str());
  devices_check_available(devices);
  auto group = std::make_shared<LocalGroup>(static_cast<int>(devices.size()), timeout_s);
  std::vector<std::unique_ptr<Communicator>> members;
  for (size_t r = 0; r < devices.size(); ++r)
    members.push_back(std::make_unique<LocalCommunicator>(group, static_cast<int>(r), devices[r]));
  return members;
}

}  // namespace fanout::comm
