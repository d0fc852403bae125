#pragma once
// Communicator: the collectives the DDP articles teach (broadcast, reduce, all_reduce,
// gather, scatter, all_gather, reduce_scatter, all_to_all, barrier, broadcast_object)
// for users, over one member's buffers, in two settings with one API: members that
// are devices of this process (make_local_communicators, one thread per member) and
// members that are processes (make_process_communicator: Gloo for CPU, NCCL for GPU).
// Note [Communicator semantics] in communicator.cpp tells how results are computed.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/distributed/rendezvous.h"

namespace fanout::comm {

// avg: the sum divided by size(); for i32 the integer quotient, rounded toward zero.
enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", ...

namespace calls {
struct Call;  // communicator_calls.h
}

// One member's handle. Every member calls the same collectives in the same order
// (SPMD), with the same root, op, dtype and counts; a call blocks until its results
// are in this member's buffers. Buffers are f32, bf16 or i32 tensors on device(),
// contiguous, read as flat arrays; the caller synchronises the streams that write
// them first. Reductions are exact in rank order with one rounding (see the Note),
// so every setting gives the same bits.
//
// counts (uneven sizes): counts[r] is member r's number of elements; empty means
// equal pieces. Every misuse -- on any member -- is a one-line fanout::Error thrown
// by every member (they compare their calls before moving data), and the
// communicator stays usable. A member that fails or never calls makes the others
// throw once the timeout passes; the communicator is then unusable.
class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device device() const { return device_; }
  virtual const char* backend() const = 0;  // "local", "gloo", "nccl"

  // buf <- root's buf.
  void broadcast(const Tensor& buf, int root);
  // root's buf <- op over every member's buf; the others' are unchanged.
  void reduce(const Tensor& buf, int root, ReduceOp op);
  // every buf <- op over every member's buf.
  void all_reduce(const Tensor& buf, ReduceOp op);
  // root's recv <- the members' sends concatenated in rank order (send has counts[rank()]
  // elements, recv their sum). Others' recv is not used (may be undefined).
  void gather(const Tensor& send, const Tensor& recv, int root,
              const std::vector<int64_t>& counts = {});
  // recv <- piece rank() of root's send (pieces of counts[r] elements in rank order).
  // Others' send is not used (may be undefined).
  void scatter(const Tensor& send, const Tensor& recv, int root,
               const std::vector<int64_t>& counts = {});
  // recv <- every member's send, concatenated in rank order.
  void all_gather(const Tensor& send, const Tensor& recv, const std::vector<int64_t>& counts = {});
  // recv <- piece rank() of op over every member's send (pieces of counts[r] elements).
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op,
                      const std::vector<int64_t>& counts = {});
  // Piece j of send (send_counts[j] elements) goes to member j, which puts it at piece
  // rank() of its recv (its recv_counts[rank()] elements). Empty counts: equal pieces.
  void all_to_all(const Tensor& send, const Tensor& recv,
                  const std::vector<int64_t>& send_counts = {},
                  const std::vector<int64_t>& recv_counts = {});
  // Returns once every member called it.
  void barrier();
  // Root's bytes (any size) to every member; the others' argument is not used.
  std::vector<char> broadcast_object(const std::vector<char>& bytes, int root);

 protected:
  Communicator(int rank, int size, Device device);

  // The transport, the one thing the settings differ in. Every member calls it at
  // the same step: sends[j] goes to member j, recvs[j] arrives from member j (j !=
  // rank(); undefined or empty tensors move nothing), tensors on device(). Returns
  // once everything arrived and was sent; throws fanout::Error when a member fails
  // or the timeout passes.
  virtual void exchange(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) = 0;
  Stream& stream() { return *stream_; }
  const char* doing() const { return doing_; }  // the collective in progress, for messages

 private:
  std::vector<calls::Call> agree(const calls::Call& mine);
  void move(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs);
  void reduce_into(const std::vector<Tensor>& parts, const Tensor& out, ReduceOp op);

  int rank_, size_;
  Device device_;
  std::unique_ptr<Stream> stream_;
  std::string failure_;  // set once a transport failed: later calls throw it
  const char* doing_ = "a collective";
};

// One member per device (duplicates allowed), each to be used from its own thread, as
// NCCL has one thread per GPU. timeout_s bounds how long a member waits for the others.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(
    const std::vector<Device>& devices, double timeout_s = 300);

// This process's member of the rendezvous' world on `device` (concrete, not bare):
// Gloo over TCP for a CPU device, NCCL for a GPU; timeout_s bounds every collective.
// Connects through the rendezvous under keys "<name>/..."; two communicators over one
// rendezvous need distinct names, and every rank makes them in the same order.
std::unique_ptr<Communicator> make_process_communicator(distributed::Rendezvous& rendezvous,
                                                        Device device, double timeout_s,
                                                        const std::string& name = "communicator");
// The two make_process_communicator picks from; NCCL throws fanout::Error in builds without it.
std::unique_ptr<Communicator> make_gloo_communicator(distributed::Rendezvous& rendezvous,
                                                     Device device, double timeout_s,
                                                     const std::string& name);
std::unique_ptr<Communicator> make_nccl_communicator(distributed::Rendezvous& rendezvous,
                                                     Device device, double timeout_s,
                                                     const std::string& name);

}  // namespace fanout::comm
