#include "engine/parallel/collectives/replica_group.h"

#include "engine/core/check.h"

namespace fanout::parallel {

ReplicaGroup::ReplicaGroup(const std::vector<Device>& devices, distributed::ProcessGroup* processes,
                           DType sum_dtype)
    : local_(make_collectives(devices)),
      processes_(processes),
      devices_(static_cast<int>(devices.size())) {
  FANOUT_ASSERT(!processes_ || devices_ == 1, "across processes each rank drives one replica");
  local_->set_sum_dtype(sum_dtype);
  if (processes_) processes_->set_sum_dtype(sum_dtype);
}

int ReplicaGroup::ranks() const {
  return processes_ ? processes_->world() : devices_;
}

int ReplicaGroup::rank0() const {
  return processes_ ? processes_->rank() : 0;
}

void ReplicaGroup::sum(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                       int64_t begin, int64_t end) {
  local_->reduce(bufs, streams, 0, begin, end);
  // then across processes, in the same order on every rank
  if (processes_) processes_->all_reduce(bufs[0], begin, end, *streams[0]);
}

void ReplicaGroup::all_gather(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                              const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  if (processes_) {
    processes_->all_gather(bufs[0], bounds, begin, end, *streams[0]);
  } else {
    local_->all_gather(bufs, streams, bounds, begin, end);
  }
}

void ReplicaGroup::reduce_scatter(const std::vector<Tensor>& bufs,
                                  const std::vector<Stream*>& streams,
                                  const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  if (processes_) {
    processes_->reduce_scatter(bufs[0], bounds, begin, end, *streams[0]);
  } else {
    local_->reduce_scatter(bufs, streams, bounds, begin, end);
  }
}

void ReplicaGroup::broadcast(const std::vector<Tensor>& bufs, const std::vector<Stream*>& streams,
                             int64_t begin, int64_t end) {
  local_->broadcast(bufs, streams, 0, begin, end);
}

void ReplicaGroup::sum_host(double* values, int n) {
  if (processes_) processes_->all_reduce_host(values, n);
}

int64_t ReplicaGroup::bytes_moved() const {
  return local_->bytes_moved() + (processes_ ? processes_->bytes_sent() : 0);
}

}  // namespace fanout::parallel
