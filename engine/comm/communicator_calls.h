#pragma once
// What a Communicator member says about its call before any data moves: the
// collective, op, root, dtype, sizes, counts and any misuse it found in its own
// arguments, as fixed-size int64 words for the transport. check_agreement()
// compares every member's description the same way on every member, so a misuse
// anywhere is one identical fanout::Error everywhere (communicator.h).

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/tensor.h"

namespace fanout::comm::calls {

enum class Kind : int64_t {
  broadcast,
  reduce,
  all_reduce,
  gather,
  scatter,
  all_gather,
  reduce_scatter,
  all_to_all,
  barrier,
  broadcast_object,
};
const char* kind_name(Kind kind);  // "all_reduce", ...

struct Call {
  Kind kind = Kind::barrier;
  int64_t op = -1, dtype = -1, root = -1;    // -1: not part of this call
  int64_t send_numel = -1, recv_numel = -1;  // -1: no such buffer on this member
  int64_t object_bytes = -1;                 // broadcast_object's root: the payload
  std::vector<int64_t> counts, recv_counts;  // as given (empty: equal pieces)
  std::string error;                         // this member's own misuse, "" if none
};

// This member's call, its arguments checked; a misuse goes into error. `send` is the
// buffer of broadcast, reduce and all_reduce; nullptr for a buffer the call does not
// use on this member.
Call describe(Kind kind, const Communicator& member, int root, const ReduceOp* op,
              const Tensor* send, const Tensor* recv, const std::vector<int64_t>* counts = nullptr,
              const std::vector<int64_t>* recv_counts = nullptr);

int64_t encoded_words(int world);
std::vector<int64_t> encode(const Call& call, int world);
Call decode(const int64_t* words, int world);

// Throws the first problem (in rank order) with the members' calls, as one line.
void check_agreement(const std::vector<Call>& every);

// Elements of each member's piece of gather, scatter, all_gather and reduce_scatter.
std::vector<int64_t> pieces(const std::vector<Call>& every, Kind kind);
// What one member of all_to_all sends to / receives from each member.
std::vector<int64_t> send_counts(const Call& call, int world);
std::vector<int64_t> recv_counts(const Call& call, int world);

}  // namespace fanout::comm::calls
