// Communicator's collectives, written once over the transport's exchange()
// (Note [Communicator semantics]); the transports live in local_communicator.cpp,
// gloo_communicator.cpp and nccl_communicator.cpp. The calls are checked in
// communicator_calls.cpp: every member's call is compared with the others' first.

#include "engine/comm/communicator.h"

#include <cmath>
#include <cstring>
#include <exception>

#include "engine/comm/communicator_calls.h"
#include "engine/core/check.h"
#include "engine/core/flat.h"

namespace fanout::comm {

// Note [Communicator semantics]
// Every collective is one or two exchanges -- each member hands the transport one
// piece for every other member and a place for every piece it receives -- plus host
// arithmetic, so the local, Gloo and NCCL settings share one algorithm. Before any
// data moves, the members exchange descriptions of their calls (kind, op, root,
// dtype, sizes, counts and any misuse found locally) and each checks them all the
// same way: a misuse on one member is the same one-line error on every member, and
// it doubles as barrier().
//
// Reductions: element i is op over the members' values in rank order, x_0 op x_1 op
// ... op x_{W-1}, accumulated in fp32 for f32 and bf16 (bf16 widened exactly, the
// result rounded to bf16 once, to nearest even) and in int64 for i32. avg divides
// the sum by W: in fp32 (then rounds, for bf16), for i32 as an integer quotient
// rounded toward zero. An i32 sum wraps modulo 2^32 as two's complement; max and
// min of floats propagate NaN. Since every setting computes the same expression, a
// reduction gives the same bits in one process and across processes.
//
// Data paths: broadcast and reduce go directly between the root and each member;
// all_reduce is a direct reduce-scatter (member r sums piece r of shard_bounds)
// then an all-gather, sending 2 (W-1)/W of the buffer per member as a ring does.
// Buffers on GPUs are reduced on the host (copied down, summed, copied up).

namespace {

using calls::Call;

Tensor flat(const Tensor& t) {
  return t.defined() ? t.reshape({t.numel()}) : t;
}

Tensor piece(const Tensor& flat_t, int64_t offset, int64_t count) {
  return flat_t.view(offset, {count});
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> at(counts.size() + 1, 0);
  for (size_t q = 0; q < counts.size(); ++q) at[q + 1] = at[q] + counts[q];
  return at;
}

// A tensor of n elements on `device`; at least one element is allocated.
Tensor scratch(int64_t n, DType dtype, Device device) {
  return Tensor::empty({std::max<int64_t>(n, 1)}, dtype, device, MemTag::comm).view(0, {n});
}

float combine(float acc, float x, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return acc + x;
    case ReduceOp::max:
      return (std::isnan(acc) || acc >= x) ? acc : x;
    case ReduceOp::min:
      return (std::isnan(acc) || acc <= x) ? acc : x;
  }
  return acc;
}

int64_t combine(int64_t acc, int64_t x, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return acc + x;
    case ReduceOp::max:
      return std::max(acc, x);
    case ReduceOp::min:
      return std::min(acc, x);
  }
  return acc;
}

// out[i] <- op over parts[q][i] in rank order (Note [Communicator semantics]).
void reduce_host(DType dtype, ReduceOp op, const std::vector<const void*>& parts, int64_t n,
                 void* out) {
  const int W = static_cast<int>(parts.size());
  if (dtype == DType::i32) {
    std::vector<int64_t> acc(static_cast<size_t>(n));
    for (int q = 0; q < W; ++q) {
      const auto* x = static_cast<const int32_t*>(parts[q]);
      for (int64_t i = 0; i < n; ++i) acc[i] = q == 0 ? x[i] : combine(acc[i], x[i], op);
    }
    auto* o = static_cast<int32_t*>(out);
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = op == ReduceOp::avg ? acc[i] / W : acc[i];
      o[i] = static_cast<int32_t>(static_cast<uint32_t>(v));  // modulo 2^32
    }
    return;
  }
  std::vector<float> acc(static_cast<size_t>(n));
  for (int q = 0; q < W; ++q) {
    for (int64_t i = 0; i < n; ++i) {
      float x = dtype == DType::bf16 ? bf16_to_float(static_cast<const uint16_t*>(parts[q])[i])
                                     : static_cast<const float*>(parts[q])[i];
      acc[i] = q == 0 ? x : combine(acc[i], x, op);
    }
  }
  if (op == ReduceOp::avg)
    for (float& a : acc) a /= static_cast<float>(W);
  if (dtype == DType::bf16) {
    auto* o = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(acc[i]);
  } else {
    std::memcpy(out, acc.data(), static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "an unknown op";
}

// --- the member's plumbing ----------------------------------------------------------

Communicator::Communicator(int rank, int size, Device device)
    : rank_(rank),
      size_(size),
      device_(device),
      stream_(std::make_unique<Stream>(device, "communicator " + std::to_string(rank))) {}

Communicator::~Communicator() = default;

// Runs the transport; a failure there leaves the members out of step, so it is
// kept and every later call throws it.
void Communicator::move(const std::vector<Tensor>& sends, const std::vector<Tensor>& recvs) {
  FANOUT_ASSERT(static_cast<int>(sends.size()) == size_ && static_cast<int>(recvs.size()) == size_,
                "exchange lists for ", size_, " members");
  try {
    exchange(sends, recvs);
  } catch (const std::exception& e) {
    failure_ = e.what();
    detail::throw_error(failure_);
  }
  const Tensor &s = sends[rank_], &r = recvs[rank_];
  if (s.defined() && r.defined() && s.numel() > 0) {
    FANOUT_ASSERT(s.numel() == r.numel(), "self copy ", s.str(), " -> ", r.str());
    tensor_copy(*stream_, r, s);
    stream_->synchronize();
  }
}

// Every member's call, after checking that they fit together (communicator_calls.h);
// throws the first problem, the same on every member.
std::vector<Call> Communicator::agree(const Call& mine) {
  FANOUT_CHECK(failure_.empty(), calls::kind_name(mine.kind), " on member ", rank_,
               ": this communicator is unusable after an earlier failure: ", failure_);
  doing_ = calls::kind_name(mine.kind);
  const int64_t words = calls::encoded_words(size_);
  std::vector<int64_t> host = calls::encode(mine, size_);
  Tensor out = scratch(words, DType::i64, device_);
  Tensor in = scratch(words * size_, DType::i64, device_);
  tensor_upload(*stream_, out, host.data());
  std::vector<Tensor> sends(size_), recvs(size_);
  for (int j = 0; j < size_; ++j) {
    sends[j] = out;
    recvs[j] = piece(in, j * words, words);
  }
  move(sends, recvs);
  std::vector<int64_t> all = tensor_to_vector<int64_t>(*stream_, in);
  std::vector<Call> every;
  for (int q = 0; q < size_; ++q) every.push_back(calls::decode(all.data() + q * words, size_));
  calls::check_agreement(every);
  return every;
}

// out <- op over parts (rank order), on the host.
void Communicator::reduce_into(const std::vector<Tensor>& parts, const Tensor& out, ReduceOp op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  std::vector<std::vector<char>> copies(parts.size());
  std::vector<const void*> p(parts.size());
  for (size_t q = 0; q < parts.size(); ++q) {
    if (parts[q].device().is_cpu()) {
      p[q] = parts[q].raw();
    } else {
      copies[q].resize(parts[q].nbytes());
      tensor_to_host(*stream_, parts[q], copies[q].data());
      p[q] = copies[q].data();
    }
  }
  if (out.device().is_cpu()) {
    stream_->synchronize();
    reduce_host(out.dtype(), op, p, n, out.raw());
  } else {
    std::vector<char> result(out.nbytes());
    reduce_host(out.dtype(), op, p, n, result.data());
    tensor_upload(*stream_, out, result.data());
  }
}

// --- the collectives ------------------------------------------------------------------

void Communicator::broadcast(const Tensor& buf, int root) {
  Call c = calls::describe(calls::Kind::broadcast, *this, root, nullptr, &buf, nullptr);
  agree(c);
  Tensor b = flat(buf);
  std::vector<Tensor> sends(size_), recvs(size_);
  if (rank_ == root) {
    for (int j = 0; j < size_; ++j)
      if (j != root) sends[j] = b;
  } else {
    recvs[root] = b;
  }
  move(sends, recvs);
}

void Communicator::reduce(const Tensor& buf, int root, ReduceOp op) {
  Call c = calls::describe(calls::Kind::reduce, *this, root, &op, &buf, nullptr);
  agree(c);
  Tensor b = flat(buf);
  const int64_t n = b.numel();
  std::vector<Tensor> sends(size_), recvs(size_), parts(size_);
  if (rank_ == root) {
    Tensor in = scratch(n * size_, b.dtype(), device_);
    for (int q = 0; q < size_; ++q) parts[q] = q == root ? b : piece(in, q * n, n);
    for (int j = 0; j < size_; ++j)
      if (j != root) recvs[j] = parts[j];
  } else {
    sends[root] = b;
  }
  move(sends, recvs);
  if (rank_ == root) reduce_into(parts, b, op);
}

void Communicator::all_reduce(const Tensor& buf, ReduceOp op) {
  Call c = calls::describe(calls::Kind::all_reduce, *this, 0, &op, &buf, nullptr);
  agree(c);
  Tensor b = flat(buf);
  const std::vector<int64_t> at = shard_bounds(b.numel(), size_);
  const int64_t m = at[rank_ + 1] - at[rank_];
  Tensor mine = piece(b, at[rank_], m), in = scratch(m * size_, b.dtype(), device_);
  // Reduce-scatter: piece j of every member to member j, summed in rank order there.
  std::vector<Tensor> sends(size_), recvs(size_), parts(size_);
  for (int j = 0; j < size_; ++j) {
    parts[j] = j == rank_ ? mine : piece(in, j * m, m);
    if (j == rank_) continue;
    sends[j] = piece(b, at[j], at[j + 1] - at[j]);
    recvs[j] = parts[j];
  }
  move(sends, recvs);
  reduce_into(parts, mine, op);
  // All-gather of the reduced pieces.
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    sends[j] = mine;
    recvs[j] = piece(b, at[j], at[j + 1] - at[j]);
  }
  move(sends, recvs);
}

void Communicator::gather(const Tensor& send, const Tensor& recv, int root,
                          const std::vector<int64_t>& counts) {
  Call c = calls::describe(calls::Kind::gather, *this, root, nullptr, &send,
                           rank_ == root ? &recv : nullptr, &counts);
  const std::vector<int64_t> n = calls::pieces(agree(c), calls::Kind::gather);
  const std::vector<int64_t> at = offsets_of(n);
  std::vector<Tensor> sends(size_), recvs(size_);
  sends[root] = flat(send);
  if (rank_ == root)
    for (int j = 0; j < size_; ++j) recvs[j] = piece(flat(recv), at[j], n[j]);
  move(sends, recvs);
}

void Communicator::scatter(const Tensor& send, const Tensor& recv, int root,
                           const std::vector<int64_t>& counts) {
  Call c = calls::describe(calls::Kind::scatter, *this, root, nullptr,
                           rank_ == root ? &send : nullptr, &recv, &counts);
  const std::vector<int64_t> n = calls::pieces(agree(c), calls::Kind::scatter);
  const std::vector<int64_t> at = offsets_of(n);
  std::vector<Tensor> sends(size_), recvs(size_);
  recvs[root] = flat(recv);
  if (rank_ == root)
    for (int j = 0; j < size_; ++j) sends[j] = piece(flat(send), at[j], n[j]);
  move(sends, recvs);
}

void Communicator::all_gather(const Tensor& send, const Tensor& recv,
                              const std::vector<int64_t>& counts) {
  Call c = calls::describe(calls::Kind::all_gather, *this, 0, nullptr, &send, &recv, &counts);
  const std::vector<int64_t> n = calls::pieces(agree(c), calls::Kind::all_gather);
  const std::vector<int64_t> at = offsets_of(n);
  std::vector<Tensor> sends(size_), recvs(size_);
  for (int j = 0; j < size_; ++j) {
    sends[j] = flat(send);
    recvs[j] = piece(flat(recv), at[j], n[j]);
  }
  move(sends, recvs);
}

void Communicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op,
                                  const std::vector<int64_t>& counts) {
  Call c = calls::describe(calls::Kind::reduce_scatter, *this, 0, &op, &send, &recv, &counts);
  const std::vector<int64_t> n = calls::pieces(agree(c), calls::Kind::reduce_scatter);
  const std::vector<int64_t> at = offsets_of(n);
  const int64_t m = n[rank_];
  Tensor s = flat(send), in = scratch(m * size_, s.dtype(), device_);
  std::vector<Tensor> sends(size_), recvs(size_), parts(size_);
  for (int j = 0; j < size_; ++j) {
    parts[j] = j == rank_ ? piece(s, at[rank_], m) : piece(in, j * m, m);
    if (j == rank_) continue;
    sends[j] = piece(s, at[j], n[j]);
    recvs[j] = parts[j];
  }
  move(sends, recvs);
  reduce_into(parts, flat(recv), op);
}

void Communicator::all_to_all(const Tensor& send, const Tensor& recv,
                              const std::vector<int64_t>& send_counts,
                              const std::vector<int64_t>& recv_counts) {
  Call c = calls::describe(calls::Kind::all_to_all, *this, 0, nullptr, &send, &recv, &send_counts,
                           &recv_counts);
  const std::vector<Call> every = agree(c);
  const std::vector<int64_t> out = calls::send_counts(every[rank_], size_);
  const std::vector<int64_t> in = calls::recv_counts(every[rank_], size_);
  const std::vector<int64_t> out_at = offsets_of(out), in_at = offsets_of(in);
  std::vector<Tensor> sends(size_), recvs(size_);
  for (int j = 0; j < size_; ++j) {
    sends[j] = piece(flat(send), out_at[j], out[j]);
    recvs[j] = piece(flat(recv), in_at[j], in[j]);
  }
  move(sends, recvs);
}

void Communicator::barrier() {
  agree(calls::describe(calls::Kind::barrier, *this, 0, nullptr, nullptr, nullptr));
}

std::vector<char> Communicator::broadcast_object(const std::vector<char>& bytes, int root) {
  Call c = calls::describe(calls::Kind::broadcast_object, *this, root, nullptr, nullptr, nullptr);
  if (rank_ == root) c.object_bytes = static_cast<int64_t>(bytes.size());
  const int64_t n = agree(c)[root].object_bytes;
  // The bytes travel as i32 words (the last one padded).
  const int64_t words = (n + 3) / 4;
  std::vector<char> host(static_cast<size_t>(words * 4), 0);
  if (rank_ == root) std::copy(bytes.begin(), bytes.end(), host.begin());
  Tensor t = scratch(words, DType::i32, device_);
  if (rank_ == root) tensor_upload(*stream_, t, host.data());
  std::vector<Tensor> sends(size_), recvs(size_);
  if (rank_ == root) {
    for (int j = 0; j < size_; ++j)
      if (j != root) sends[j] = t;
  } else {
    recvs[root] = t;
  }
  move(sends, recvs);
  if (rank_ == root) return bytes;
  if (words > 0) tensor_to_host(*stream_, t, host.data());
  host.resize(static_cast<size_t>(n));
  return host;
}

std::unique_ptr<Communicator> make_process_communicator(distributed::Rendezvous& rendezvous,
                                                        Device device, double timeout_s,
                                                        const std::string& name) {
  FANOUT_CHECK(!device.is_bare(), "a process communicator needs a concrete device (", device.str(),
               ":<index>), got ", device.str());
  FANOUT_CHECK(timeout_s > 0, "the communicator's timeout must be positive, got ", timeout_s, " s");
  FANOUT_CHECK(!name.empty() && name.find('/') == std::string::npos,
               "a communicator's name must be non-empty without '/', got \"", name, "\"");
  if (device.is_cpu()) return make_gloo_communicator(rendezvous, device, timeout_s, name);
  return make_nccl_communicator(rendezvous, device, timeout_s, name);
}

}  // namespace fanout::comm
