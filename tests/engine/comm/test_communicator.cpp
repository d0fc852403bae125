// Communicator (engine/comm/communicator.h): every collective against a direct
// computation for 1 to 4 members, in one process (cpu:0..cpu:3, one thread per
// member) and across processes (Gloo, one Rendezvous member per thread), with
// equal and uneven counts, f32 / bf16 / i32 and every op; the two settings give the
// same bits; misuse on any member is the same one-line error on every member and
// leaves the communicator usable; a member that never calls or goes away makes the
// others throw within the timeout. Only the test thread asserts.

#include <doctest/doctest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "engine/comm/communicator.h"
#include "engine/core/check.h"
#include "tests/engine/distributed/rendezvous_test_util.h"

using namespace fanout;
using comm::Communicator;
using comm::ReduceOp;
namespace rdzv = fanout::test::rdzv;

namespace {

constexpr double kTimeoutS = 10;
const DType kDTypes[] = {DType::f32, DType::bf16, DType::i32};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// The members of one group, each run on its own thread.
struct Members {
  std::unique_ptr<rdzv::Job> job;  // across processes: destroyed after the members
  std::vector<std::unique_ptr<Communicator>> comms;
  int size() const { return static_cast<int>(comms.size()); }
  Communicator& operator[](int r) { return *comms[r]; }
  // fn(member) on one thread per member; rethrows the first error.
  void run(const std::function<void(Communicator&)>& fn) {
    rdzv::on_every_rank(size(), [&](int r) { fn(*comms[r]); });
  }
};

Members local_members(int world, double timeout_s = kTimeoutS) {
  std::vector<Device> devices;
  for (int r = 0; r < world; ++r) devices.push_back(cpu_device(r));
  return {nullptr, comm::make_local_communicators(devices, timeout_s)};
}

Members process_members(int world, double timeout_s = kTimeoutS) {
  Members m{std::make_unique<rdzv::Job>(world, world), {}};
  m.comms.resize(world);
  rdzv::on_every_rank(world, [&](int r) {
    m.comms[r] = comm::make_process_communicator((*m.job)[r], cpu_device(0), timeout_s);
  });
  return m;
}

using Setting = std::function<Members(int)>;
const std::pair<const char*, Setting> kSettings[] = {
    {"local", [](int w) { return local_members(w); }},
    {"gloo", [](int w) { return process_members(w); }},
};

// Small integers, different on every member and element, negatives included:
// sums are exact in every dtype.
int value(int r, int64_t i) {
  return static_cast<int>((r * 7 + i * 3 + 5) % 41) - 20;
}

// A CPU tensor holding `v` in `dtype`.
Tensor make(DType dtype, const std::vector<double>& v, Device device) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype, device);
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
// Member r's values at elements [begin, begin + n).
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

std::vector<int64_t> uneven_counts(int world) {
  const std::vector<int64_t> c = {3, 0, 5, 2};
  return {c.begin(), c.begin() + world};
}
std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> at(counts.size() + 1, 0);
  for (size_t q = 0; q < counts.size(); ++q) at[q + 1] = at[q] + counts[q];
  return at;
}

// The error every member threw (all must throw the same), or "" when none did.
std::vector<std::string> errors_of(Members& m, const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> what(static_cast<size_t>(m.size()));
  m.run([&](Communicator& c) {
    try {
      fn(c);
    } catch (const Error& e) {
      what[c.rank()] = e.what();
    }
  });
  return what;
}

}  // namespace

// --- every collective against direct computation ---------------------------------------

TEST_CASE(
    "communicator: broadcast / reduce / all_reduce match direct computation for 1-4 members") {
  for (const auto& [setting, make_members] : kSettings) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(setting);
      CAPTURE(world);
      Members m = make_members(world);
      const int64_t n = 7;  // not a multiple of 2, 3 or 4: all_reduce's pieces are uneven
      for (DType dtype : kDTypes) {
        CAPTURE(dtype_name(dtype));
        std::vector<std::vector<double>> out(world);
        for (int root = 0; root < world; ++root) {
          m.run([&](Communicator& c) {
            Tensor b = make(dtype, values(c.rank(), 0, n), c.device());
            c.broadcast(b, root);
            out[c.rank()] = read(b);
          });
          for (int r = 0; r < world; ++r) CHECK(out[r] == values(root, 0, n));
        }
        for (ReduceOp op : kOps) {
          CAPTURE(comm::reduce_op_name(op));
          const int root = world - 1;
          m.run([&](Communicator& c) {
            Tensor b = make(dtype, values(c.rank(), 0, n), c.device());
            c.reduce(b, root, op);
            out[c.rank()] = read(b);
          });
          for (int r = 0; r < world; ++r)
            for (int64_t i = 0; i < n; ++i)
              CHECK(out[r][i] == (r == root ? reduced(dtype, op, world, i) : value(r, i)));
          m.run([&](Communicator& c) {
            Tensor b = make(dtype, values(c.rank(), 0, n), c.device());
            c.all_reduce(b, op);
            out[c.rank()] = read(b);
          });
          for (int r = 0; r < world; ++r)
            for (int64_t i = 0; i < n; ++i) CHECK(out[r][i] == reduced(dtype, op, world, i));
        }
      }
    }
  }
}

TEST_CASE(
    "communicator: gather / scatter / all_gather match with equal and uneven counts for 1-4 "
    "members") {
  for (const auto& [setting, make_members] : kSettings) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(setting);
      CAPTURE(world);
      Members m = make_members(world);
      for (bool uneven : {false, true}) {
        CAPTURE(uneven);
        std::vector<int64_t> counts = uneven ? uneven_counts(world) : std::vector<int64_t>{};
        std::vector<int64_t> n = uneven ? counts : std::vector<int64_t>(world, 3);
        std::vector<int64_t> at = offsets(n);
        // Member r's piece holds value(r, i) at the elements it covers in the whole.
        std::vector<double> whole_root, whole;
        for (int r = 0; r < world; ++r)
          for (double v : values(r, at[r], n[r])) whole.push_back(v);
        for (DType dtype : kDTypes) {
          CAPTURE(dtype_name(dtype));
          const int root = world / 2;
          std::vector<std::vector<double>> out(world);
          m.run([&](Communicator& c) {
            Tensor send = make(dtype, values(c.rank(), at[c.rank()], n[c.rank()]), c.device());
            Tensor recv = c.rank() == root
                              ? make(dtype, std::vector<double>(at[world], -99), c.device())
                              : Tensor();
            c.gather(send, recv, root, counts);
            out[c.rank()] = recv.defined() ? read(recv) : std::vector<double>{};
          });
          CHECK(out[root] == whole);
          m.run([&](Communicator& c) {
            Tensor send = c.rank() == root ? make(dtype, whole, c.device()) : Tensor();
            Tensor recv = make(dtype, std::vector<double>(n[c.rank()], -99), c.device());
            c.scatter(send, recv, root, counts);
            out[c.rank()] = read(recv);
          });
          for (int r = 0; r < world; ++r) CHECK(out[r] == values(r, at[r], n[r]));
          m.run([&](Communicator& c) {
            Tensor send = make(dtype, values(c.rank(), at[c.rank()], n[c.rank()]), c.device());
            Tensor recv = make(dtype, std::vector<double>(at[world], -99), c.device());
            c.all_gather(send, recv, counts);
            out[c.rank()] = read(recv);
          });
          for (int r = 0; r < world; ++r) CHECK(out[r] == whole);
        }
      }
    }
  }
}

TEST_CASE(
    "communicator: reduce_scatter / all_to_all match with equal and uneven counts for 1-4 "
    "members") {
  for (const auto& [setting, make_members] : kSettings) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(setting);
      CAPTURE(world);
      Members m = make_members(world);
      for (bool uneven : {false, true}) {
        CAPTURE(uneven);
        std::vector<int64_t> counts = uneven ? uneven_counts(world) : std::vector<int64_t>{};
        std::vector<int64_t> n = uneven ? counts : std::vector<int64_t>(world, 2);
        std::vector<int64_t> at = offsets(n);
        for (DType dtype : kDTypes) {
          CAPTURE(dtype_name(dtype));
          std::vector<std::vector<double>> out(world);
          for (ReduceOp op : kOps) {
            CAPTURE(comm::reduce_op_name(op));
            m.run([&](Communicator& c) {
              Tensor send = make(dtype, values(c.rank(), 0, at[world]), c.device());
              Tensor recv = make(dtype, std::vector<double>(n[c.rank()], -99), c.device());
              c.reduce_scatter(send, recv, op, counts);
              out[c.rank()] = read(recv);
            });
            for (int r = 0; r < world; ++r)
              for (int64_t k = 0; k < n[r]; ++k)
                CHECK(out[r][k] == reduced(dtype, op, world, at[r] + k));
          }
          // all_to_all: member r sends count(r, j) elements to member j.
          auto count = [&](int r, int j) -> int64_t { return uneven ? (r + 2 * j) % 3 : 2; };
          m.run([&](Communicator& c) {
            const int r = c.rank();
            std::vector<int64_t> sc, rc;
            std::vector<double> send_v;
            for (int j = 0; j < world; ++j) {
              sc.push_back(count(r, j));
              rc.push_back(count(j, r));
              for (int64_t k = 0; k < count(r, j); ++k) send_v.push_back(value(r, 10 * j + k));
            }
            int64_t total_in = 0;
            for (int64_t x : rc) total_in += x;
            Tensor send = make(dtype, send_v, c.device());
            Tensor recv = make(dtype, std::vector<double>(total_in, -99), c.device());
            if (uneven)
              c.all_to_all(send, recv, sc, rc);
            else
              c.all_to_all(send, recv);
            out[r] = read(recv);
          });
          for (int r = 0; r < world; ++r) {
            std::vector<double> expect;
            for (int j = 0; j < world; ++j)
              for (int64_t k = 0; k < count(j, r); ++k) expect.push_back(value(j, 10 * r + k));
            CHECK(out[r] == expect);
          }
        }
      }
    }
  }
}

TEST_CASE("communicator: barrier waits for every member, broadcast_object sends any bytes") {
  for (const auto& [setting, make_members] : kSettings) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(setting);
      CAPTURE(world);
      Members m = make_members(world);
      std::atomic<int> arrived{0};
      std::vector<int> seen(world);
      m.run([&](Communicator& c) {
        if (c.rank() == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ++arrived;
        c.barrier();
        seen[c.rank()] = arrived.load();
      });
      for (int r = 0; r < world; ++r) CHECK(seen[r] == world);

      for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4096 + 3}}) {
        CAPTURE(bytes);
        const int root = world - 1;
        std::vector<char> object(bytes);
        for (size_t i = 0; i < bytes; ++i) object[i] = static_cast<char>(i * 31 + 7);
        std::vector<std::vector<char>> got(world);
        m.run([&](Communicator& c) {
          std::vector<char> mine = c.rank() == root ? object : std::vector<char>(5, 'x');
          got[c.rank()] = c.broadcast_object(mine, root);
        });
        for (int r = 0; r < world; ++r) CHECK(got[r] == object);
      }
    }
  }
}

TEST_CASE("communicator: i32 avg rounds toward zero and i32 sums wrap, max and min propagate NaN") {
  Members m = local_members(2);
  std::vector<std::vector<double>> out(2);
  m.run([&](Communicator& c) {
    // sums -5, 5, 2^31 (wraps to -2^31), -3
    std::vector<double> x =
        c.rank() == 0 ? std::vector<double>{-7, 7, INT_MAX, -1} : std::vector<double>{2, -2, 1, -2};
    Tensor a = make(DType::i32, x, c.device()), s = make(DType::i32, x, c.device());
    c.all_reduce(a, ReduceOp::avg);
    c.all_reduce(s, ReduceOp::sum);
    std::vector<double> got = read(a), sums = read(s);
    got.insert(got.end(), sums.begin(), sums.end());
    Tensor f = make(DType::f32, {c.rank() == 1 ? NAN : 1.0, 2.0}, c.device());
    c.all_reduce(f, ReduceOp::max);
    for (double v : read(f)) got.push_back(v);
    out[c.rank()] = got;
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(out[r].size() == 10);
    CHECK(out[r][0] == -2);  // -5 / 2 toward zero, not -3
    CHECK(out[r][1] == 2);
    CHECK(out[r][2] == static_cast<double>((int64_t{INT_MAX} + 1) / 2));  // no overflow in avg
    CHECK(out[r][3] == -1);
    CHECK(out[r][4] == -5);
    CHECK(out[r][6] == INT_MIN);  // INT_MAX + 1 wraps
    CHECK(std::isnan(out[r][8]));
    CHECK(out[r][9] == 2);
  }
}

TEST_CASE(
    "communicator: f32 and bf16 reductions round once and give the same bits in both settings") {
  const int world = 3;
  const int64_t n = 101;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<std::vector<double>> x(world, std::vector<double>(n));
  for (auto& v : x)
    for (double& f : v) f = bf16_to_float(float_to_bf16(u(rng)));  // exact in bf16 and f32
  std::map<std::string, std::vector<std::vector<uint32_t>>> bits;  // setting -> member -> bits
  for (const auto& [setting, make_members] : kSettings) {
    Members m = make_members(world);
    auto& b = bits[setting];
    b.assign(world, {});
    m.run([&](Communicator& c) {
      std::vector<uint32_t> mine;
      for (DType dtype : {DType::f32, DType::bf16})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          Tensor t = make(dtype, x[c.rank()], c.device());
          c.all_reduce(t, op);
          for (int64_t i = 0; i < n; ++i)
            mine.push_back(dtype == DType::f32 ? std::bit_cast<uint32_t>(t.data<float>()[i])
                                               : t.data<uint16_t>()[i]);
        }
      b[c.rank()] = mine;
    });
  }
  int64_t differs_from_hop_rounding = 0;
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(bits["local"][r] == bits["gloo"][r]);
    CHECK(bits["local"][r] == bits["local"][0]);
    for (int64_t i = 0; i < n; ++i) {
      float sum = (static_cast<float>(x[0][i]) + static_cast<float>(x[1][i])) +
                  static_cast<float>(x[2][i]);  // rank order, in fp32
      CHECK(bits["local"][r][i] == std::bit_cast<uint32_t>(sum));
      CHECK(bits["local"][r][n + i] == std::bit_cast<uint32_t>(sum / 3.f));
      CHECK(bits["local"][r][2 * n + i] == float_to_bf16(sum));  // rounded once
      CHECK(bits["local"][r][3 * n + i] == float_to_bf16(sum / 3.f));
      // Rounding after each hop would give another answer somewhere.
      uint16_t hop =
          float_to_bf16(bf16_to_float(float_to_bf16(static_cast<float>(x[0][i] + x[1][i]))) +
                        static_cast<float>(x[2][i]));
      differs_from_hop_rounding += hop != float_to_bf16(sum);
    }
  }
  CHECK(differs_from_hop_rounding > 0);
}

// --- misuse ---------------------------------------------------------------------------

TEST_CASE("communicator: misuse on any member is the same one-line error on every member") {
  struct Misuse {
    const char* expect;
    std::function<void(Communicator&)> call;
  };
  auto f32 = [](Communicator& c, int64_t n) {
    return make(DType::f32, std::vector<double>(n, 1), c.device());
  };
  const std::vector<Misuse> misuses = {
      {"all_reduce: member 1's buf is i64[4] on cpu:1; collectives take f32, bf16 or i32",
       [&](Communicator& c) {
         Tensor t = c.rank() == 1 ? Tensor::empty({4}, DType::i64, c.device()) : f32(c, 4);
         c.all_reduce(t, ReduceOp::sum);
       }},
      {"all_reduce: buf sizes differ: member 0 has 4 elements, member 1 has 5",
       [&](Communicator& c) {
         Tensor t = f32(c, 4 + c.rank());
         c.all_reduce(t, ReduceOp::sum);
       }},
      {"all_reduce: members disagree on the dtype: member 0 has f32, member 1 has bf16",
       [&](Communicator& c) {
         c.all_reduce(make(c.rank() ? DType::bf16 : DType::f32, {1, 2}, c.device()), ReduceOp::sum);
       }},
      {"broadcast: member 0's root 2 is out of range for 2 members",
       [&](Communicator& c) { c.broadcast(f32(c, 3), 2); }},
      {"all_reduce: members disagree on the op: member 0 says sum, member 1 says max",
       [&](Communicator& c) { c.all_reduce(f32(c, 3), c.rank() ? ReduceOp::max : ReduceOp::sum); }},
      {"collectives out of step: member 0 called broadcast, member 1 called all_reduce",
       [&](Communicator& c) {
         if (c.rank() == 0)
           c.broadcast(f32(c, 3), 0);
         else
           c.all_reduce(f32(c, 3), ReduceOp::sum);
       }},
      {"gather: member 0's counts has 3 entries for 2 members",
       [&](Communicator& c) {
         c.gather(f32(c, 2), f32(c, 4), 0, {2, 2, 0});
       }},
      {"all_gather: member 1's send has 3 elements, but counts[1] is 2",
       [&](Communicator& c) {
         c.all_gather(f32(c, c.rank() ? 3 : 2), f32(c, 4), {2, 2});
       }},
      {"all_gather: member 0's recv has 5 elements, but 2 sends of 2 make 4",
       [&](Communicator& c) { c.all_gather(f32(c, 2), f32(c, 5)); }},
      {"gather: sends differ in size: member 0 has 2 elements, member 1 has 3; pass counts for "
       "uneven sizes",
       [&](Communicator& c) {
         c.gather(f32(c, 2 + c.rank()), c.rank() ? Tensor() : f32(c, 4), 0);
       }},
      {"reduce_scatter: members disagree on counts: member 0 says [1, 3], member 1 says [2, 2]",
       [&](Communicator& c) {
         c.reduce_scatter(f32(c, 4), f32(c, c.rank() ? 2 : 1), ReduceOp::sum,
                          c.rank() ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{1, 3});
       }},
      {"all_to_all: member 0 sends 3 elements to member 1, which expects 1 from it",
       [&](Communicator& c) {
         std::vector<int64_t> sc =
             c.rank() ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1, 3};
         std::vector<int64_t> rc = {1, 1};
         c.all_to_all(f32(c, sc[0] + sc[1]), f32(c, 2), sc, rc);
       }},
      {"reduce: member 1's buf is on cpu:0, not on the member's device cpu:1",
       [&](Communicator& c) {
         c.reduce(make(DType::f32, {1, 2}, cpu_device(0)), 0, ReduceOp::sum);
       }},
      {"all_to_all: member 0's send has 3 elements, not a multiple of 2 members; pass send_counts "
       "for uneven pieces",
       [&](Communicator& c) { c.all_to_all(f32(c, 3), f32(c, 4)); }},
  };
  for (const auto& [setting, make_members] : kSettings) {
    CAPTURE(setting);
    Members m = make_members(2);
    for (const Misuse& misuse : misuses) {
      // The process members all live on cpu:0: the device case is for the local group.
      if (std::string(misuse.expect).find("cpu:1") != std::string::npos &&
          setting == std::string("gloo"))
        continue;
      CAPTURE(misuse.expect);
      std::vector<std::string> what = errors_of(m, misuse.call);
      for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        CHECK(what[r] == misuse.expect);
      }
    }
    // Still usable afterwards.
    std::vector<std::vector<double>> out(2);
    m.run([&](Communicator& c) {
      Tensor t = make(DType::f32, {1.0 + c.rank(), 5}, c.device());
      c.all_reduce(t, ReduceOp::sum);
      out[c.rank()] = read(t);
    });
    CHECK(out[0] == std::vector<double>{3, 10});
    CHECK(out[1] == std::vector<double>{3, 10});
  }
}

TEST_CASE("communicator: bad construction arguments are one-line errors") {
  auto what = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(what([] { comm::make_local_communicators({}); }) ==
        "a local communicator needs at least one device");
  CHECK(what([] { comm::make_local_communicators({cpu_device(0)}, 0); }) ==
        "the communicator's timeout must be positive, got 0 s");
  rdzv::Job job(1, 1);
  CHECK(what([&] {
          comm::make_process_communicator(job[0], device_parse("cpu"), 1);
        }).find("a process communicator needs a concrete device") == 0);
}

// --- failures -------------------------------------------------------------------------

TEST_CASE("communicator: a local member that never calls makes the others throw, not hang") {
  Members m = local_members(3, 0.5);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> what(3);
  rdzv::on_every_rank(2, [&](int r) {  // member 2 never calls
    try {
      Tensor t = make(DType::f32, {1, 2, 3}, m[r].device());
      m[r].all_reduce(t, ReduceOp::sum);
    } catch (const Error& e) {
      what[r] = e.what();
    }
  });
  double took = rdzv::seconds_since(t0);
  CHECK(took < 3);
  for (int r = 0; r < 2; ++r) {
    CAPTURE(what[r]);
    CHECK(what[r].find("member(s) 2, which never reached the collective") != std::string::npos);
    CHECK(what[r].find('\n') == std::string::npos);
  }
  // The late member learns that the group failed instead of waiting.
  std::string late;
  try {
    m[2].barrier();
  } catch (const Error& e) {
    late = e.what();
  }
  CHECK(late.find("never reached the collective") != std::string::npos);
}

TEST_CASE("communicator: a process member that never calls or goes away fails the others in time") {
  {
    // The error comes after the timeout plus the rendezvous' 2 s look for a dead rank.
    Members m = process_members(2, 0.5);
    auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      Tensor t = make(DType::f32, {1, 2, 3}, cpu_device(0));
      m[0].all_reduce(t, ReduceOp::sum);  // rank 1 never calls
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(rdzv::seconds_since(t0) < 4);
    CAPTURE(what);
    CHECK(what.find("rank 0: all_reduce failed: no rank has died (gloo: ") == 0);
    CHECK(what.find('\n') == std::string::npos);
    // Unusable afterwards, said at once.
    std::string again;
    try {
      m[0].barrier();
    } catch (const Error& e) {
      again = e.what();
    }
    CHECK(again.find("barrier on member 0: this communicator is unusable after an earlier "
                     "failure: rank 0: all_reduce failed") == 0);
  }
  {
    Members m = process_members(3, 0.5);
    m.comms[2].reset();  // member 2 goes away: its connections close
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> what(2);
    rdzv::on_every_rank(2, [&](int r) {
      try {
        m[r].barrier();
      } catch (const Error& e) {
        what[r] = e.what();
      }
    });
    CHECK(rdzv::seconds_since(t0) < 4);
    for (int r = 0; r < 2; ++r) {
      CAPTURE(what[r]);
      CHECK(what[r].find("rank " + std::to_string(r) + ": barrier failed: ") == 0);
    }
  }
}
