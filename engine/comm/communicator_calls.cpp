// The descriptions Communicator members compare before a collective moves data:
// the checks of one member's own arguments, the fixed-size encoding, and the
// checks that the members' calls fit together.

#include "engine/comm/communicator_calls.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>
#include <sstream>

#include "engine/core/check.h"

namespace fanout::comm::calls {

namespace {

constexpr int64_t kMagic = 0x436f6d6d43616c6c;  // "CommCall"
constexpr int64_t kHeaderWords = 11;
constexpr int64_t kErrorChars = 240;
constexpr int64_t kErrorWords = kErrorChars / 8;

bool has_root(Kind k) {
  return k == Kind::broadcast || k == Kind::reduce || k == Kind::gather || k == Kind::scatter ||
         k == Kind::broadcast_object;
}
bool has_op(Kind k) {
  return k == Kind::reduce || k == Kind::all_reduce || k == Kind::reduce_scatter;
}
// The collectives whose pieces are described by one shared counts vector.
bool has_pieces(Kind k) {
  return k == Kind::gather || k == Kind::scatter || k == Kind::all_gather ||
         k == Kind::reduce_scatter;
}
bool one_buffer(Kind k) {
  return k == Kind::broadcast || k == Kind::reduce || k == Kind::all_reduce;
}

std::string list_str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// The first misuse found sticks.
template <typename... Args>
void note(Call& c, const Args&... args) {
  if (c.error.empty()) c.error = detail::str_cat(args...);
}

void check_buffer(Call& c, const char* name, const Tensor& t, Device device) {
  if (!t.defined()) return note(c, name, " is an undefined tensor");
  if (t.device() != device)
    return note(c, name, " is on ", t.device().str(), ", not on the member's device ",
                device.str());
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::i32)
    return note(c, name, " is ", t.str(), "; collectives take f32, bf16 or i32");
  if (c.dtype < 0) c.dtype = static_cast<int64_t>(t.dtype());
  if (c.dtype != static_cast<int64_t>(t.dtype()))
    note(c, "send is ", dtype_name(static_cast<DType>(c.dtype)), " but recv is ",
         dtype_name(t.dtype()), "; they must match");
}

void check_counts(Call& c, const char* name, const std::vector<int64_t>& counts, int world) {
  if (counts.empty()) return;
  if (static_cast<int>(counts.size()) != world)
    return note(c, name, " has ", counts.size(), " entries for ", world, " members");
  for (int q = 0; q < world; ++q)
    if (counts[q] < 0)
      return note(c, name, "[", q, "] is ", counts[q], "; counts cannot be negative");
}

// Sizes this member can check alone.
void check_sizes(Call& c, int rank, int world) {
  if (!c.error.empty()) return;
  const bool given = !c.counts.empty();
  const int64_t s = c.send_numel, r = c.recv_numel;
  auto expect = [&](const char* name, int64_t have, int64_t want, const std::string& why) {
    if (have >= 0 && have != want) note(c, name, " has ", have, " elements, but ", why);
  };
  const std::string mine = "counts[" + std::to_string(rank) + "] is ";
  const std::string sum = "counts add up to ";
  switch (c.kind) {
    case Kind::gather:
    case Kind::all_gather:
      if (given) {
        expect("send", s, c.counts[rank], mine + std::to_string(c.counts[rank]));
        expect("recv", r, total(c.counts), sum + std::to_string(total(c.counts)));
      } else {
        expect("recv", r, world * s,
               std::to_string(world) + " sends of " + std::to_string(s) + " make " +
                   std::to_string(world * s));
      }
      break;
    case Kind::scatter:
    case Kind::reduce_scatter:
      if (given) {
        expect("recv", r, c.counts[rank], mine + std::to_string(c.counts[rank]));
        expect("send", s, total(c.counts), sum + std::to_string(total(c.counts)));
      } else {
        expect("send", s, world * r,
               std::to_string(world) + " recvs of " + std::to_string(r) + " make " +
                   std::to_string(world * r));
      }
      break;
    case Kind::all_to_all:
      if (!c.counts.empty())
        expect("send", s, total(c.counts),
               "send_counts add up to " + std::to_string(total(c.counts)));
      else if (s % world != 0)
        note(c, "send has ", s, " elements, not a multiple of ", world,
             " members; pass send_counts for uneven pieces");
      if (!c.recv_counts.empty())
        expect("recv", r, total(c.recv_counts),
               "recv_counts add up to " + std::to_string(total(c.recv_counts)));
      else if (r % world != 0)
        note(c, "recv has ", r, " elements, not a multiple of ", world,
             " members; pass recv_counts for uneven pieces");
      break;
    default:
      break;
  }
}

}  // namespace

const char* kind_name(Kind kind) {
  static const char* const names[] = {
      "broadcast",  "reduce",         "all_reduce", "gather",  "scatter",
      "all_gather", "reduce_scatter", "all_to_all", "barrier", "broadcast_object"};
  auto k = static_cast<size_t>(kind);
  return k < std::size(names) ? names[k] : "an unknown collective";
}

Call describe(Kind kind, const Communicator& member, int root, const ReduceOp* op,
              const Tensor* send, const Tensor* recv, const std::vector<int64_t>* counts,
              const std::vector<int64_t>* recv_counts) {
  const int world = member.size();
  Call c;
  c.kind = kind;
  if (has_root(kind)) {
    c.root = root;
    if (root < 0 || root >= world)
      note(c, "root ", root, " is out of range for ", world, " members");
  }
  if (has_op(kind)) {
    c.op = static_cast<int64_t>(*op);
    if (c.op < 0 || c.op > static_cast<int64_t>(ReduceOp::min))
      note(c, "op ", c.op, " is not sum, avg, max or min");
  }
  if (send) {
    check_buffer(c, one_buffer(kind) ? "buf" : "send", *send, member.device());
    if (send->defined()) c.send_numel = send->numel();
  }
  if (recv) {
    check_buffer(c, "recv", *recv, member.device());
    if (recv->defined()) c.recv_numel = recv->numel();
  }
  if (counts) {
    c.counts = *counts;
    check_counts(c, kind == Kind::all_to_all ? "send_counts" : "counts", *counts, world);
  }
  if (recv_counts) {
    c.recv_counts = *recv_counts;
    check_counts(c, "recv_counts", *recv_counts, world);
  }
  check_sizes(c, member.rank(), world);
  return c;
}

// --- encoding -------------------------------------------------------------------------

int64_t encoded_words(int world) {
  return kHeaderWords + 2 * world + kErrorWords;
}

std::vector<int64_t> encode(const Call& c, int world) {
  std::vector<int64_t> w(static_cast<size_t>(encoded_words(world)), 0);
  std::string error = c.error.substr(0, kErrorChars);
  int64_t header[kHeaderWords] = {kMagic,
                                  static_cast<int64_t>(c.kind),
                                  c.op,
                                  c.dtype,
                                  c.root,
                                  c.send_numel,
                                  c.recv_numel,
                                  c.object_bytes,
                                  static_cast<int64_t>(c.counts.size()),
                                  static_cast<int64_t>(c.recv_counts.size()),
                                  static_cast<int64_t>(error.size())};
  std::copy(header, header + kHeaderWords, w.begin());
  // Counts of the wrong length are a misuse already noted: only their length travels.
  if (static_cast<int>(c.counts.size()) == world)
    std::copy(c.counts.begin(), c.counts.end(), w.begin() + kHeaderWords);
  if (static_cast<int>(c.recv_counts.size()) == world)
    std::copy(c.recv_counts.begin(), c.recv_counts.end(), w.begin() + kHeaderWords + world);
  std::memcpy(w.data() + kHeaderWords + 2 * world, error.data(), error.size());
  return w;
}

Call decode(const int64_t* w, int world) {
  FANOUT_ASSERT(w[0] == kMagic, "a member sent a malformed call description");
  Call c;
  c.kind = static_cast<Kind>(w[1]);
  c.op = w[2], c.dtype = w[3], c.root = w[4];
  c.send_numel = w[5], c.recv_numel = w[6], c.object_bytes = w[7];
  auto counts_at = [&](int64_t n, const int64_t* at) {
    return n == world ? std::vector<int64_t>(at, at + world) : std::vector<int64_t>(n, 0);
  };
  c.counts = counts_at(w[8], w + kHeaderWords);
  c.recv_counts = counts_at(w[9], w + kHeaderWords + world);
  int64_t chars = std::clamp<int64_t>(w[10], 0, kErrorChars);
  c.error.assign(reinterpret_cast<const char*>(w + kHeaderWords + 2 * world),
                 static_cast<size_t>(chars));
  return c;
}

// --- agreement ------------------------------------------------------------------------

void check_agreement(const std::vector<Call>& every) {
  const Call& first = every[0];
  const char* what = kind_name(first.kind);
  const int world = static_cast<int>(every.size());
  for (int q = 1; q < world; ++q)
    FANOUT_CHECK(every[q].kind == first.kind, "collectives out of step: member 0 called ", what,
                 ", member ", q, " called ", kind_name(every[q].kind));
  for (int q = 0; q < world; ++q)
    FANOUT_CHECK(every[q].error.empty(), what, ": member ", q, "'s ", every[q].error);
  auto op_name = [](int64_t op) { return reduce_op_name(static_cast<ReduceOp>(op)); };
  auto dtype_of = [](int64_t d) { return d < 0 ? "no buffer" : dtype_name(static_cast<DType>(d)); };
  for (int q = 1; q < world; ++q) {
    const Call& c = every[q];
    FANOUT_CHECK(c.root == first.root, what, ": members disagree on the root: member 0 says ",
                 first.root, ", member ", q, " says ", c.root);
    FANOUT_CHECK(c.op == first.op, what, ": members disagree on the op: member 0 says ",
                 op_name(first.op), ", member ", q, " says ", op_name(c.op));
    if (has_pieces(first.kind))
      FANOUT_CHECK(c.counts == first.counts, what, ": members disagree on counts: member 0 says ",
                   list_str(first.counts), ", member ", q, " says ", list_str(c.counts));
    if (one_buffer(first.kind))
      FANOUT_CHECK(c.send_numel == first.send_numel, what, ": buf sizes differ: member 0 has ",
                   first.send_numel, " elements, member ", q, " has ", c.send_numel);
  }
  // gather's non-root members describe only a send, scatter's only a recv: the
  // dtype of the others must match the first that has one.
  for (int q = 0; q < world; ++q)
    for (int p = 0; p < q; ++p)
      FANOUT_CHECK(every[p].dtype < 0 || every[q].dtype < 0 || every[p].dtype == every[q].dtype,
                   what, ": members disagree on the dtype: member ", p, " has ",
                   dtype_of(every[p].dtype), ", member ", q, " has ", dtype_of(every[q].dtype));
  if (has_pieces(first.kind) && first.counts.empty()) {
    bool sends = first.kind == Kind::gather || first.kind == Kind::all_gather;
    for (int q = 1; q < world; ++q) {
      int64_t a = sends ? first.send_numel : first.recv_numel;
      int64_t b = sends ? every[q].send_numel : every[q].recv_numel;
      FANOUT_CHECK(a == b, what, ": ", sends ? "sends" : "recvs", " differ in size: member 0 has ",
                   a, " elements, member ", q, " has ", b, "; pass counts for uneven sizes");
    }
  }
  if (first.kind == Kind::all_to_all) {
    for (int i = 0; i < world; ++i) {
      std::vector<int64_t> out = send_counts(every[i], world);
      for (int j = 0; j < world; ++j) {
        int64_t in = recv_counts(every[j], world)[i];
        FANOUT_CHECK(out[j] == in, what, ": member ", i, " sends ", out[j], " elements to member ",
                     j, ", which expects ", in, " from it");
      }
    }
  }
}

std::vector<int64_t> pieces(const std::vector<Call>& every, Kind kind) {
  const Call& first = every[0];
  if (!first.counts.empty()) return first.counts;
  bool sends = kind == Kind::gather || kind == Kind::all_gather;
  return std::vector<int64_t>(every.size(), sends ? first.send_numel : first.recv_numel);
}

std::vector<int64_t> send_counts(const Call& c, int world) {
  if (!c.counts.empty()) return c.counts;
  return std::vector<int64_t>(static_cast<size_t>(world), c.send_numel / world);
}

std::vector<int64_t> recv_counts(const Call& c, int world) {
  if (!c.recv_counts.empty()) return c.recv_counts;
  return std::vector<int64_t>(static_cast<size_t>(world), c.recv_numel / world);
}

}  // namespace fanout::comm::calls
