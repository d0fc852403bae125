// The process communicator (make_process_communicator, Gloo) across real OS
// processes: the test forks one child per rank, each child meets the others through
// its own Rendezvous (rank 0's child serves) and runs every collective on f32, bf16
// and i32 buffers, checking each result against a direct computation; a child that
// dies between two collectives, or is stopped and killed in the middle of one,
// makes the others throw a one-line fanout::Error in time. test_communicator.cpp
// checks the same collectives with one thread per member. The children are forked:
// Note [Forking the test binary] (fork_util.h).

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/check.h"
#include "tests/engine/distributed/fork_util.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using comm::Communicator;
using comm::ReduceOp;
namespace rdzv = fanout::test::rdzv;
using namespace fanout::test::fork;

namespace {

const DType kDTypes[] = {DType::f32, DType::bf16, DType::i32};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// --- expected values (as in test_communicator.cpp) -------------------------------------

// Small integers, different on every rank and element, negatives included: sums are
// exact in every dtype.
int value(int r, int64_t i) {
  return static_cast<int>((r * 7 + i * 3 + 5) % 41) - 20;
}
std::vector<double> values(int r, int64_t begin, int64_t n) {
  std::vector<double> v;
  for (int64_t i = begin; i < begin + n; ++i) v.push_back(value(r, i));
  return v;
}

// op over value(0, i) .. value(W-1, i), as communicator.h defines it.
double reduced(DType dtype, ReduceOp op, int world, int64_t i) {
  int64_t sum = 0, hi = INT64_MIN, lo = INT64_MAX;
  for (int r = 0; r < world; ++r) {
    sum += value(r, i);
    hi = std::max<int64_t>(hi, value(r, i));
    lo = std::min<int64_t>(lo, value(r, i));
  }
  switch (op) {
    case ReduceOp::sum:
      return static_cast<double>(sum);
    case ReduceOp::max:
      return static_cast<double>(hi);
    case ReduceOp::min:
      return static_cast<double>(lo);
    case ReduceOp::avg:
      break;
  }
  if (dtype == DType::i32) return static_cast<double>(sum / world);  // toward zero
  float avg = static_cast<float>(sum) / static_cast<float>(world);
  return dtype == DType::bf16 ? bf16_to_float(float_to_bf16(avg)) : avg;
}

Tensor make(DType dtype, const std::vector<double>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype, cpu_device(0));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) t.data<float>()[i] = static_cast<float>(v[i]);
    if (dtype == DType::bf16) t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v[i]));
    if (dtype == DType::i32) t.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
  }
  return t;
}
std::vector<double> read(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype() == DType::f32) v[i] = t.data<float>()[i];
    if (t.dtype() == DType::bf16) v[i] = bf16_to_float(t.data<uint16_t>()[i]);
    if (t.dtype() == DType::i32) v[i] = t.data<int32_t>()[i];
  }
  return v;
}

std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> at(counts.size() + 1, 0);
  for (size_t q = 0; q < counts.size(); ++q) at[q + 1] = at[q] + counts[q];
  return at;
}

// --- the children ------------------------------------------------------------------------

std::string str(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
void expect_equal(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  if (got != want) throw Mismatch(what + ": got " + str(got) + ", expected " + str(want));
}

// Every collective on f32, bf16 and i32 against the direct computation, in this
// rank's child. `arrived` counts the ranks that reached the barrier.
std::string every_collective(Communicator& c, std::atomic<int>& arrived) {
  const int rank = c.rank(), world = c.size();
  const int64_t n = 7;  // not a multiple of 2, 3 or 4: uneven pieces inside the reductions
  for (DType dtype : kDTypes) {
    const std::string in = std::string(" (") + dtype_name(dtype) + ")";
    for (int root = 0; root < world; ++root) {
      Tensor b = make(dtype, values(rank, 0, n));
      c.broadcast(b, root);
      expect_equal(read(b), values(root, 0, n), "broadcast from " + std::to_string(root) + in);
    }
    for (ReduceOp op : kOps) {
      const std::string name = std::string(comm::reduce_op_name(op)) + in;
      std::vector<double> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = reduced(dtype, op, world, i);
      const int root = world - 1;
      Tensor b = make(dtype, values(rank, 0, n));
      c.reduce(b, root, op);
      expect_equal(read(b), rank == root ? want : values(rank, 0, n), "reduce " + name);
      b = make(dtype, values(rank, 0, n));
      c.all_reduce(b, op);
      expect_equal(read(b), want, "all_reduce " + name);
    }
    for (bool uneven : {false, true}) {
      const std::string how = in + (uneven ? ", uneven counts" : ", equal pieces");
      const std::vector<int64_t> all_counts = {3, 0, 5, 2};
      std::vector<int64_t> counts =
          uneven ? std::vector<int64_t>(all_counts.begin(), all_counts.begin() + world)
                 : std::vector<int64_t>{};
      std::vector<int64_t> sizes = uneven ? counts : std::vector<int64_t>(world, 3);
      std::vector<int64_t> at = offsets(sizes);
      // Rank q's piece holds value(q, i) at the elements it covers in the whole.
      std::vector<double> whole;
      for (int q = 0; q < world; ++q)
        for (double v : values(q, at[q], sizes[q])) whole.push_back(v);
      const int root = world / 2;
      Tensor recv = rank == root ? make(dtype, std::vector<double>(at[world], -99)) : Tensor();
      c.gather(make(dtype, values(rank, at[rank], sizes[rank])), recv, root, counts);
      if (rank == root) expect_equal(read(recv), whole, "gather" + how);
      recv = make(dtype, std::vector<double>(sizes[rank], -99));
      c.scatter(rank == root ? make(dtype, whole) : Tensor(), recv, root, counts);
      expect_equal(read(recv), values(rank, at[rank], sizes[rank]), "scatter" + how);
      recv = make(dtype, std::vector<double>(at[world], -99));
      c.all_gather(make(dtype, values(rank, at[rank], sizes[rank])), recv, counts);
      expect_equal(read(recv), whole, "all_gather" + how);
      for (ReduceOp op : kOps) {
        recv = make(dtype, std::vector<double>(sizes[rank], -99));
        c.reduce_scatter(make(dtype, values(rank, 0, at[world])), recv, op, counts);
        std::vector<double> want;
        for (int64_t k = 0; k < sizes[rank]; ++k)
          want.push_back(reduced(dtype, op, world, at[rank] + k));
        expect_equal(read(recv), want,
                     std::string("reduce_scatter ") + comm::reduce_op_name(op) + how);
      }
      // all_to_all: rank q sends count(q, j) elements to rank j.
      auto count = [&](int q, int j) -> int64_t { return uneven ? (q + 2 * j) % 3 : 2; };
      std::vector<int64_t> sc, rc;
      std::vector<double> send, want;
      for (int j = 0; j < world; ++j) {
        sc.push_back(count(rank, j));
        rc.push_back(count(j, rank));
        for (int64_t k = 0; k < count(rank, j); ++k) send.push_back(value(rank, 10 * j + k));
        for (int64_t k = 0; k < count(j, rank); ++k) want.push_back(value(j, 10 * rank + k));
      }
      recv = make(dtype, std::vector<double>(want.size(), -99));
      if (uneven)
        c.all_to_all(make(dtype, send), recv, sc, rc);
      else
        c.all_to_all(make(dtype, send), recv);
      expect_equal(read(recv), want, "all_to_all" + how);
    }
  }
  // The barrier returns only once every rank has counted itself in; the last one is late.
  if (rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ++arrived;
  c.barrier();
  if (arrived.load() != world)
    throw Mismatch("barrier returned when " + std::to_string(arrived.load()) + " of " +
                   std::to_string(world) + " ranks had arrived");
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4096 + 3}}) {
    const int root = world - 1;
    std::vector<char> object(bytes);
    for (size_t i = 0; i < bytes; ++i) object[i] = static_cast<char>(i * 31 + 7);
    std::vector<char> got =
        c.broadcast_object(rank == root ? object : std::vector<char>(5, 'x'), root);
    if (got != object)
      throw Mismatch("broadcast_object of " + std::to_string(bytes) + " bytes gave " +
                     std::to_string(got.size()) + " bytes, or other bytes");
  }
  return "ok";
}

// This rank's member of a `world`-rank job on 127.0.0.1:port (rank 0 serves).
struct Member {
  distributed::Rendezvous rendezvous;
  std::unique_ptr<Communicator> comm;
  Member(int port, int rank, int world, double timeout_s)
      : rendezvous("127.0.0.1", port, rank, world, std::chrono::milliseconds(5000)),
        comm(comm::make_process_communicator(rendezvous, cpu_device(0), timeout_s)) {
    FANOUT_CHECK(
        comm->rank() == rank && comm->size() == world && comm->backend() == std::string("gloo"),
        "rank ", rank, " got member ", comm->rank(), " of ", comm->size(), " (", comm->backend(),
        ")");
  }
};

}  // namespace

// --- every collective across processes ----------------------------------------------------

TEST_CASE(
    "communicator across OS processes: every collective matches direct computation for 2-4 "
    "ranks") {
  for (int world = 2; world <= 4; ++world) {
    CAPTURE(world);
    SharedCounter arrived;
    const int port = rdzv::free_port();
    std::vector<Outcome> out = run_children(world, 12, [&](int rank) {
      Member m(port, rank, world, 5);
      return every_collective(*m.comm, *arrived);
    });
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CAPTURE(out[r].said);
      CHECK(out[r].ended == "exit 0");
      CHECK(out[r].said == "ok");
    }
    CHECK((*arrived).load() == world);
  }
}

// --- a rank that dies -------------------------------------------------------------------

TEST_CASE(
    "communicator across OS processes: a rank that exits between collectives makes the others "
    "throw a one-line error in time") {
  const int world = 3;
  const double timeout_s = 1;
  for (int dying : {1, 0}) {  // a plain rank, then the master (its rendezvous goes with it)
    CAPTURE(dying);
    const int port = rdzv::free_port();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Outcome> out = run_children(world, 10, [&](int rank) {
      Member m(port, rank, world, timeout_s);
      Tensor t = make(DType::f32, values(rank, 0, 5));
      m.comm->all_reduce(t, ReduceOp::sum);
      std::vector<double> want;
      for (int64_t i = 0; i < 5; ++i) want.push_back(reduced(DType::f32, ReduceOp::sum, world, i));
      expect_equal(read(t), want, "the first all_reduce");
      if (rank == dying) ::_exit(3);
      auto t1 = std::chrono::steady_clock::now();
      std::string what;
      try {
        t = make(DType::f32, values(rank, 0, 5));
        m.comm->all_reduce(t, ReduceOp::sum);
      } catch (const Error& e) {
        what = e.what();
      }
      if (what.empty()) throw Mismatch("the second all_reduce did not throw");
      const double took = rdzv::seconds_since(t1);
      // Later calls say at once that the communicator is unusable.
      std::string again;
      try {
        m.comm->barrier();
      } catch (const Error& e) {
        again = e.what();
      }
      if (again.find("this communicator is unusable after an earlier failure") == std::string::npos)
        throw Mismatch("a barrier after the failure said \"" + again + "\"");
      return what + "\n" + std::to_string(took);
    });
    CHECK(rdzv::seconds_since(t0) < 8);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CAPTURE(out[r].said);
      if (r == dying) {
        CHECK(out[r].ended == "exit 3");
        continue;
      }
      CHECK(out[r].ended == "exit 0");
      // "<error>\n<seconds>": the error is one line, names the dead rank and came in time.
      const size_t nl = out[r].said.rfind('\n');
      if (out[r].ended != "exit 0" || nl == std::string::npos) continue;
      const std::string what = out[r].said.substr(0, nl);
      const double took = std::stod(out[r].said.substr(nl + 1));
      CHECK(what.find('\n') == std::string::npos);
      const std::string dead = dying == 0 ? "the master (rank 0) died" : "rank 1 died";
      CHECK(what.find("rank " + std::to_string(r) + ": all_reduce failed: " + dead + " (gloo: ") ==
            0);
      // The communicator's timeout plus the rendezvous' 2 s look for a dead rank, at most.
      CHECK(took < timeout_s + 2.5);
    }
  }
}

TEST_CASE(
    "communicator across OS processes: a rank stopped and then killed in the middle of an "
    "all_reduce ends it on the others within seconds, long before the timeout") {
  // The dying rank stops itself (SIGSTOP) while the all_reduce is under way, its
  // buffer too large to have gone through, and a survivor kills it (SIGKILL) a
  // moment later, as a crash or an OOM kill would. Whether gloo notices (a
  // receive from the dead rank fails) or the GlooWatch does (a send handed to
  // the pair before the receiver stopped reading is one gloo never wakes), the
  // others stop within seconds (test_process_group_death.cpp forces the second).
  const int world = 3;
  const double timeout_s = 60;
  const int64_t n = int64_t{24} << 20;
  for (int dying : {1, 0}) {  // a plain rank, then the master (its rendezvous goes with it)
    CAPTURE(dying);
    const int port = rdzv::free_port();
    SharedCounter pid;
    std::vector<Outcome> out = run_children(world, 30, [&](int rank) {
      Member m(port, rank, world, timeout_s);
      Tensor t = make(DType::f32, std::vector<double>(n, 1.0));
      m.comm->barrier();
      std::thread helper;
      if (rank == dying)
        helper = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          (*pid) = static_cast<int>(::getpid());
          ::raise(SIGSTOP);
        });
      if (rank == (dying + 1) % world)
        helper = std::thread([&] {
          while ((*pid).load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill((*pid).load(), SIGKILL);
        });
      auto t1 = std::chrono::steady_clock::now();
      std::string what;
      try {
        m.comm->all_reduce(t, ReduceOp::sum);
      } catch (const Error& e) {
        what = e.what();
      }
      const double took = rdzv::seconds_since(t1);
      if (helper.joinable()) helper.join();
      if (what.empty()) throw Mismatch("the all_reduce did not throw");
      return what + "\n" + std::to_string(took);
    });
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CAPTURE(out[r].said);
      if (r == dying) {
        CHECK(out[r].ended == "signal 9 (Killed)");
        continue;
      }
      CHECK(out[r].ended == "exit 0");
      const size_t nl = out[r].said.rfind('\n');
      if (out[r].ended != "exit 0" || nl == std::string::npos) continue;
      const std::string what = out[r].said.substr(0, nl);
      const std::string dead = dying == 0 ? "the master (rank 0) died" : "rank 1 died";
      CHECK(what.find("rank " + std::to_string(r) + ": all_reduce failed: " + dead) == 0);
      CHECK(what.find('\n') == std::string::npos);
      // The death comes about 0.3 s in; then a look or two of the watch.
      CHECK(std::stod(out[r].said.substr(nl + 1)) < 3);
    }
  }
}
