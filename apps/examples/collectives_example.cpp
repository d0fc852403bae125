// The collectives of the DDP articles through fanout::comm::Communicator: one
// function, tour(), called by every member with its own handle (SPMD), prints what
// each collective gave. The same function runs in two settings:
//
//   In one process: members are CPU devices cpu:0..cpu:N-1, one thread each
//   (N from the only argument, 1 to 64, default 4; --help says so):
//     build/apps/examples/fanout_collectives_example 3
//
//   Across processes: when RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set,
//   this process is member RANK of WORLD_SIZE (Gloo over TCP; rank 0 serves the
//   rendezvous on MASTER_PORT). Start one process per rank, e.g. two by hand:
//     export MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2
//     RANK=0 build/apps/examples/fanout_collectives_example &
//     RANK=1 build/apps/examples/fanout_collectives_example
//   or with torchrun, which sets the same variables:
//     torchrun --nproc-per-node 2 --no-python build/apps/examples/fanout_collectives_example
//
// Both settings print the same results: reductions are computed in rank order with
// one rounding wherever the members are (communicator.h).

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/check.h"
#include "engine/core/number_text.h"

namespace {

using namespace fanout;
using comm::Communicator;
using comm::ReduceOp;

constexpr int kMaxInt = std::numeric_limits<int>::max();

// A CPU tensor of `dtype` holding `values`.
Tensor make(Communicator& c, DType dtype, const std::vector<float>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, dtype, c.device());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) t.data<float>()[i] = values[i];
    if (dtype == DType::bf16) t.data<uint16_t>()[i] = float_to_bf16(values[i]);
    if (dtype == DType::i32) t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
  }
  return t;
}

std::string show(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.dtype() == DType::f32    ? t.data<float>()[i]
               : t.dtype() == DType::bf16 ? bf16_to_float(t.data<uint16_t>()[i])
                                          : t.data<int32_t>()[i];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", v);
    s += buf;
  }
  return s + "]";
}

// Every member runs this, in the same order. `say` records one line of output.
template <typename Say>
void tour(Communicator& c, Say&& say) {
  const int r = c.rank(), W = c.size();
  const float x = static_cast<float>(r + 1);  // member r's own number

  // broadcast: the root's buffer to everyone.
  Tensor b = make(c, DType::f32, r == 0 ? std::vector<float>{3.5f, -1, 7} : std::vector<float>(3));
  std::string before = show(b);
  c.broadcast(b, 0);
  say("broadcast from 0:        " + before + " -> " + show(b));

  // all_reduce with each op: every member gets op over all members' buffers (i32 avg is
  // the integer quotient rounded toward zero: -3 / 2 gives -1).
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    Tensor t = make(c, DType::i32, {x, -x, 10 * x});
    before = show(t);
    c.all_reduce(t, op);
    say(std::string("all_reduce i32 ") + comm::reduce_op_name(op) + ":      " + before + " -> " +
        show(t));
  }
  // bf16: summed in fp32, rounded to bf16 once.
  Tensor h = make(c, DType::bf16, {0.1f * x, 256 + x});
  before = show(h);
  c.all_reduce(h, ReduceOp::sum);
  say("all_reduce bf16 sum:     " + before + " -> " + show(h));

  // reduce: only the root's buffer changes.
  Tensor s = make(c, DType::f32, {x, x * x});
  before = show(s);
  c.reduce(s, W - 1, ReduceOp::sum);
  say("reduce sum to " + std::to_string(W - 1) + ":         " + before + " -> " + show(s));

  // all_gather with uneven counts: member q contributes q+1 copies of q+1.
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int q = 0; q < W; ++q) counts.push_back(q + 1), total += q + 1;
  Tensor mine = make(c, DType::f32, std::vector<float>(r + 1, x));
  Tensor all = make(c, DType::f32, std::vector<float>(total));
  c.all_gather(mine, all, counts);
  say("all_gather (uneven):     " + show(mine) + " -> " + show(all));

  // gather to 0 (equal pieces): only the root needs a receive buffer.
  Tensor g = r == 0 ? make(c, DType::f32, std::vector<float>(2 * W)) : Tensor();
  c.gather(make(c, DType::f32, {x, -x}), g, 0);
  if (r == 0)
    say("gather to 0:             -> " + show(g));
  else
    say("gather to 0:             sent " + show(make(c, DType::f32, {x, -x})));

  // scatter from 0: piece q of the root's buffer goes to member q.
  std::vector<float> pieces;
  for (int q = 0; q < 2 * W; ++q) pieces.push_back(static_cast<float>(10 * q));
  Tensor piece = make(c, DType::f32, {0, 0});
  c.scatter(r == 0 ? make(c, DType::f32, pieces) : Tensor(), piece, 0);
  say("scatter from 0:          -> " + show(piece));

  // reduce_scatter: the sum of everyone's buffer, member q keeps piece q.
  std::vector<float> full;
  for (int q = 0; q < 2 * W; ++q) full.push_back(x * static_cast<float>(q));
  Tensor in = make(c, DType::f32, full), out = make(c, DType::f32, {0, 0});
  c.reduce_scatter(in, out, ReduceOp::sum);
  say("reduce_scatter sum:      " + show(in) + " -> " + show(out));

  // all_to_all: piece q of my buffer goes to member q; I receive piece r of each.
  std::vector<float> letters;
  for (int q = 0; q < W; ++q) letters.push_back(static_cast<float>(10 * r + q));
  Tensor send = make(c, DType::i32, letters), recv = make(c, DType::i32, std::vector<float>(W));
  c.all_to_all(send, recv);
  say("all_to_all:              " + show(send) + " -> " + show(recv));

  // broadcast_object: any bytes, e.g. a config string only the root knows.
  std::string text = r == 0 ? "lr=3e-4 steps=1000" : "";
  std::vector<char> got = c.broadcast_object({text.begin(), text.end()}, 0);
  say("broadcast_object from 0: \"" + std::string(got.begin(), got.end()) + "\"");

  c.barrier();
  say("barrier:                 every member arrived");
}

int run_local(int members) {
  std::vector<Device> devices;
  for (int r = 0; r < members; ++r) devices.push_back(cpu_device(r));
  auto comms = comm::make_local_communicators(devices, 60);
  std::vector<std::vector<std::string>> lines(members);
  std::vector<std::string> errors(members);
  std::vector<std::thread> threads;
  for (int r = 0; r < members; ++r)
    threads.emplace_back([&, r] {
      try {
        tour(*comms[r], [&](const std::string& line) { lines[r].push_back(line); });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < members; ++r)
    if (!errors[r].empty()) {
      std::fprintf(stderr, "error: member %d: %s\n", r, errors[r].c_str());
      return 1;
    }
  std::printf("%d members in this process (%s), one thread each\n", members,
              devices_str(devices).c_str());
  for (size_t k = 0; k < lines[0].size(); ++k)
    for (int r = 0; r < members; ++r) std::printf("[member %d] %s\n", r, lines[r][k].c_str());
  return 0;
}

// $name as a whole number in [lo, hi], by fanout's rules for numbers a user types.
int env_int(const char* name, int lo, int hi) {
  const char* v = std::getenv(name);
  return static_cast<int>(parse_whole_number(v ? v : "", lo, hi, name));
}

int run_process() {
  const char* addr = std::getenv("MASTER_ADDR");
  FANOUT_CHECK(addr && std::getenv("MASTER_PORT") && std::getenv("WORLD_SIZE"),
               "RANK is set: MASTER_ADDR, MASTER_PORT and WORLD_SIZE must be set too");
  const int world = env_int("WORLD_SIZE", 1, kMaxInt);
  const int rank = env_int("RANK", 0, world - 1);
  distributed::Rendezvous rendezvous(addr, env_int("MASTER_PORT", 1, 65535), rank, world,
                                     std::chrono::milliseconds(60000));
  auto comm = comm::make_process_communicator(rendezvous, cpu_device(0), 60);
  if (rank == 0) std::printf("%d processes, backend %s\n", world, comm->backend());
  tour(*comm, [&](const std::string& line) { std::printf("[rank %d] %s\n", rank, line.c_str()); });
  std::fflush(stdout);
  return 0;
}

constexpr const char* kUsage =
    "usage: fanout_collectives_example [MEMBERS]\n"
    "  Runs every collective among MEMBERS CPU devices of this process, one thread each\n"
    "  (1 to 64, default 4). With RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as\n"
    "  torchrun sets them), this process is member RANK of WORLD_SIZE and takes no MEMBERS.\n";

// A usage error: one line, exit code 2.
[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "fanout_collectives_example: error: %s (see --help)\n", why.c_str());
  std::exit(2);
}

// The members of the in-process setting, from the command line (exits on --help).
int members_from_args(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
  }
  if (args.empty()) return 4;
  if (args.size() > 1)
    usage_error("one argument at most (MEMBERS), got " + std::to_string(args.size()));
  const std::string& a = args[0];
  if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1]))) {
    usage_error("unknown flag " + a);
  }
  if (std::getenv("RANK"))
    usage_error("RANK is set: each process is one member, MEMBERS does not apply");
  try {
    return static_cast<int>(parse_whole_number(a, 1, 64, "MEMBERS"));
  } catch (const Error& e) {
    usage_error(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int members = members_from_args(argc, argv);
  try {
    if (std::getenv("RANK")) return run_process();
    return run_local(members);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
