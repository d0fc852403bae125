// TensorPeers: a generation-counted rendezvous (Note [Tensor peers rendezvous])
// in front of one Collectives object for the group.

#include "engine/parallel/tensor/tensor_peers.h"

#include <algorithm>
#include <utility>

#include "engine/core/check.h"
#include "engine/parallel/step_aborted.h"

namespace fanout::parallel {

TensorPeers::TensorPeers(std::vector<Device> devices) : devices_(std::move(devices)) {
  FANOUT_CHECK(!devices_.empty(), "a tensor-parallel group needs at least one device");
  collectives_ = make_collectives(devices_);
  bufs_.resize(devices_.size());
  streams_.assign(devices_.size(), nullptr);
}

// Ranks are their owners' threads, gone (or never in a call) by now.
TensorPeers::~TensorPeers() = default;

void TensorPeers::all_reduce(int rank, const Tensor& buf, Stream& stream, int64_t n) {
  rendezvous(rank, {Kind::all_reduce, n, buf.dtype()}, buf, stream);
}

void TensorPeers::all_gather(int rank, const Tensor& buf, Stream& stream, int64_t part) {
  rendezvous(rank, {Kind::all_gather, part, buf.dtype()}, buf, stream);
}

void TensorPeers::reduce_scatter(int rank, const Tensor& buf, Stream& stream, int64_t part) {
  rendezvous(rank, {Kind::reduce_scatter, part, buf.dtype()}, buf, stream);
}

void TensorPeers::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

void TensorPeers::reset() {
  std::unique_lock<std::mutex> lock(mu_);
  FANOUT_CHECK(aborted_ || inside_ == 0, "TensorPeers::reset while ", inside_,
               " rank(s) wait in a collective that was not aborted");
  cv_.wait(lock, [&] { return inside_ == 0; });
  aborted_ = false;
  arrived_ = 0;
  first_rank_ = -1;
  problem_.clear();
  ended_problem_.clear();
  std::fill(bufs_.begin(), bufs_.end(), Tensor());
  std::fill(streams_.begin(), streams_.end(), nullptr);
}

// ---

std::string TensorPeers::request_str(const Request& req) {
  switch (req.kind) {
    case Kind::all_reduce:
      return detail::str_cat("all_reduce(n=", req.count, ", ", dtype_name(req.dtype), ")");
    case Kind::all_gather:
      return detail::str_cat("all_gather(part=", req.count, ", ", dtype_name(req.dtype), ")");
    case Kind::reduce_scatter:
      return detail::str_cat("reduce_scatter(part=", req.count, ", ", dtype_name(req.dtype), ")");
  }
  return "?";
}

std::string TensorPeers::argument_problem(int rank, const Request& req, const Tensor& buf,
                                          const Stream& stream) const {
  const std::string who = detail::str_cat("rank ", rank, "'s ", request_str(req));
  const Device dev = devices_[rank];
  if (!buf.defined()) return who + ": the buffer is undefined";
  if (buf.device() != dev || stream.device() != dev)
    return detail::str_cat(who, ": buffer on ", buf.device().str(), ", stream on ",
                           stream.device().str(), ", rank ", rank, " is ", dev.str());
  const bool sum = req.kind != Kind::all_gather;
  if (req.dtype != DType::f32 && (sum || req.dtype != DType::bf16))
    return detail::str_cat(who, ": ", sum ? "sums take f32" : "all_gather takes f32 or bf16");
  if (req.count < 0) return who + ": a negative size";
  const int64_t need = req.kind == Kind::all_reduce ? req.count : req.count * size();
  if (buf.numel() < need)
    return detail::str_cat(who, ": the buffer holds ", buf.numel(), " elements, ", need, " needed");
  return {};
}

void TensorPeers::launch(const Request& req) {
  if (size() == 1 || req.count == 0) return;
  if (req.kind == Kind::all_reduce) {
    collectives_->all_reduce(bufs_, streams_, 0, req.count);
    return;
  }
  std::vector<int64_t> bounds(devices_.size() + 1);
  for (size_t r = 0; r < bounds.size(); ++r) bounds[r] = static_cast<int64_t>(r) * req.count;
  if (req.kind == Kind::all_gather)
    collectives_->all_gather(bufs_, streams_, bounds, 0, bounds.back());
  else
    collectives_->reduce_scatter(bufs_, streams_, bounds, 0, bounds.back());
}

void TensorPeers::rendezvous(int rank, const Request& req, const Tensor& buf, Stream& stream) {
  FANOUT_CHECK(rank >= 0 && rank < size(), "tensor-parallel rank ", rank, " is not in 0..",
               size() - 1);
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw StepAborted("stopped: another tensor-parallel rank failed in this step");
  FANOUT_CHECK(streams_[rank] == nullptr, "tensor-parallel rank ", rank, " entered collective #",
               generation_, " twice (two threads for one rank?)");
  // The round's first arrival states what it is; later ones must agree.
  if (arrived_ == 0) {
    request_ = req;
    first_rank_ = rank;
  } else if (problem_.empty() && (req.kind != request_.kind || req.count != request_.count ||
                                  req.dtype != request_.dtype)) {
    problem_ = detail::str_cat("rank ", rank, " called ", request_str(req), " but rank ",
                               first_rank_, " called ", request_str(request_));
  }
  if (problem_.empty()) problem_ = argument_problem(rank, req, buf, stream);
  bufs_[rank] = buf;
  streams_[rank] = &stream;
  const uint64_t gen = generation_;
  if (++arrived_ < size()) {
    ++inside_;
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    --inside_;
    if (generation_ == gen) {  // aborted before the round ended; reset() may wait on us
      if (inside_ == 0) cv_.notify_all();
      throw StepAborted("stopped: another tensor-parallel rank failed in this step");
    }
    if (!ended_problem_.empty()) throw Error(ended_problem_);
    return;
  }
  // The last arrival: queue the collective (or refuse the round), then end it.
  std::string problem = std::move(problem_);
  if (!problem.empty()) {
    problem = detail::str_cat("tensor-parallel collective #", gen, ": ", problem,
                              "; every rank must call the same collectives, in the same order,"
                              " with valid buffers");
  } else {
    try {
      launch(request_);
    } catch (...) {
      // Partly queued: the step is lost. The others stop with StepAborted.
      aborted_ = true;
      lock.unlock();
      cv_.notify_all();
      throw;
    }
  }
  arrived_ = 0;
  first_rank_ = -1;
  problem_.clear();
  ended_problem_ = problem;
  std::fill(bufs_.begin(), bufs_.end(), Tensor());
  std::fill(streams_.begin(), streams_.end(), nullptr);
  ++generation_;
  lock.unlock();
  cv_.notify_all();
  if (!problem.empty()) throw Error(problem);
}

}  // namespace fanout::parallel
