#include "engine/distributed/launcher_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/core/check.h"
#include "engine/core/number_text.h"

namespace fanout::distributed {

// Note [Launcher precedence]
// Explicit variables win: fanout launch and torchrun mark themselves
// (FANOUT_LAUNCHER, TORCHELASTIC_RUN_ID), and RANK/WORLD_SIZE from any other
// wrapper come next, so torchrun inside a Slurm allocation is torchrun. The MPI
// launchers come before Slurm: mpirun or mpiexec inside an sbatch script
// inherits the batch step's SLURM_PROCID=0 on every rank, while srun itself
// sets no OMPI_COMM_WORLD_* variables and sets PMI_RANK equal to SLURM_PROCID.
// So PMI's variables make an MPI launch only with MPICH's (Hydra's)
// MPI_LOCALRANKID or outside Slurm: `srun --mpi=pmi2` or `--mpi=pmix` sets
// PMI_RANK or PMIX_RANK and no local rank, and is Slurm's launch.

namespace {

constexpr const char* kLooked =
    "fanout launch (FANOUT_LAUNCHER), torchrun (TORCHELASTIC_RUN_ID), RANK/WORLD_SIZE/LOCAL_RANK/"
    "MASTER_ADDR/MASTER_PORT from any wrapper, Open MPI (OMPI_COMM_WORLD_RANK), MPICH/Intel "
    "MPI (PMI_RANK, PMIX_RANK) and Slurm's srun (SLURM_PROCID)";

// Reads the variables of one launcher, naming it in its errors.
struct Reader {
  const EnvLookup& get;
  std::string who;  // "torchrun", for "a multi-process run under torchrun needs ..."

  std::optional<std::string> opt(const std::string& name) const {
    auto v = get(name);
    if (v && v->empty()) return std::nullopt;  // set but empty reads as unset
    return v;
  }
  std::string str(const std::string& name) const {
    auto v = opt(name);
    FANOUT_CHECK(v.has_value(), "a multi-process run under ", who,
                 " needs the environment variable ", name);
    return *v;
  }
  // A whole number in [lo, hi] by fanout's number rules: " 0", "0x10" and "1e3" are refused.
  int num(const std::string& name, int lo, int hi) const { return parse(name, str(name), lo, hi); }
  // A rank (or local rank, node index) of a job.
  int place(const std::string& name) const { return num(name, 0, kMaxWorldSize - 1); }
  // A count of ranks, refused past kMaxWorldSize with the reason.
  int count(const std::string& name) const {
    int n = parse(name, str(name), 1, 1 << 30);
    FANOUT_CHECK(n <= kMaxWorldSize, name, "=", n,
                 " is more ranks than one fanout job holds (at most ", kMaxWorldSize,
                 ": rank 0's rendezvous keeps a connection to every rank)");
    return n;
  }
  static int parse(const std::string& name, const std::string& v, int64_t lo, int64_t hi) {
    return static_cast<int>(parse_whole_number(v, lo, hi, "environment variable " + name));
  }
};

std::string plural(int n, const char* one) {
  return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
}

void check_place(const LauncherEnv& e, const char* rank, const char* world, const char* local,
                 const char* local_world) {
  FANOUT_CHECK(e.rank < e.world, rank, "=", e.rank, " is not below ", world, "=", e.world);
  FANOUT_CHECK(e.local_rank < e.local_world, local, "=", e.local_rank, " is not below ",
               local_world, "=", e.local_world);
  FANOUT_CHECK(e.local_world <= e.world, local_world, "=", e.local_world, " is above ", world, "=",
               e.world);
}

// MASTER_ADDR and MASTER_PORT as torchrun spells them (fanout launch, torchrun, RANK/WORLD_SIZE).
void read_master(const Reader& r, LauncherEnv& e) {
  e.master_addr = r.str("MASTER_ADDR");
  e.master_port = r.num("MASTER_PORT", 1, 65535);
}

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (default: all ranks local).
void read_torch_names(const Reader& r, LauncherEnv& e) {
  e.rank = r.place("RANK");
  e.world = r.count("WORLD_SIZE");
  e.local_rank = r.place("LOCAL_RANK");
  e.local_world = r.opt("LOCAL_WORLD_SIZE") ? r.count("LOCAL_WORLD_SIZE") : e.world;
  check_place(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  e.nodes = (e.world + e.local_world - 1) / e.local_world;
  read_master(r, e);
}

// MASTER_PORT, or one derived from the launcher's job id; a one-line error without either.
int port_or_derived(const Reader& r, const std::optional<std::string>& id, const std::string& var) {
  if (r.opt("MASTER_PORT")) return r.num("MASTER_PORT", 1, 65535);
  FANOUT_CHECK(id.has_value(), "a multi-process run under ", r.who,
               " needs MASTER_PORT (the launcher gives no job id to derive one from); set it to "
               "the same free port on every rank");
  return port_from_job_id(*id, var);
}

LauncherEnv read_slurm(const Reader& r) {
  LauncherEnv e;
  e.launcher = "slurm";
  e.rank = r.place("SLURM_PROCID");
  e.world_var = r.opt("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  e.world = r.count(e.world_var);
  e.local_rank = r.place("SLURM_LOCALID");
  int node = r.place("SLURM_NODEID");
  // This node's task count: one number for every node, or the step's (else the job's) list.
  std::string var = "SLURM_NTASKS_PER_NODE";
  if (r.opt(var)) {
    e.local_world = r.count(var);
  } else {
    var = r.opt("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    std::vector<int> tasks = slurm_tasks_per_node(r.str(var), var);
    FANOUT_CHECK(node < static_cast<int>(tasks.size()), "SLURM_NODEID=", node, " has no entry in ",
                 var, "='", r.str(var), "' (", plural(tasks.size(), "node"), ")");
    e.local_world = tasks[node];
    e.nodes = static_cast<int>(tasks.size());
  }
  check_place(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", var.c_str());
  for (const char* n : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}) {
    if (r.opt(n)) {
      e.nodes = r.count(n);
      break;
    }
  }
  if (e.nodes == 1 && e.local_world < e.world)
    e.nodes = (e.world + e.local_world - 1) / e.local_world;
  FANOUT_CHECK(node < e.nodes, "SLURM_NODEID=", node, " is not below the job's ", e.nodes,
               " nodes");
  std::string job = r.str("SLURM_JOB_ID");
  parse_whole_number(job, 0, UINT32_MAX, "environment variable SLURM_JOB_ID");  // a uint32
  auto step = r.opt("SLURM_STEP_ID");
  e.job_id = step ? job + "." + *step : job;
  // Rank 0 runs on the step's first node (srun's block distribution).
  if (auto addr = r.opt("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else {
    var = r.opt("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    auto list = r.opt(var);
    FANOUT_CHECK(
        list.has_value(),
        "a multi-process run under slurm needs MASTER_ADDR or SLURM_JOB_NODELIST (the first "
        "host is the master)");
    e.master_addr = slurm_hostlist_expand(*list, var).front();
  }
  e.master_port = port_or_derived(r, job, "SLURM_JOB_ID");
  e.secret = "slurm:" + e.job_id;
  return e;
}

LauncherEnv read_mpi(const Reader& r, bool open_mpi) {
  LauncherEnv e;
  const char *rank, *size, *local, *local_size;
  std::optional<std::string> id;
  std::string id_var;
  if (open_mpi) {
    e.launcher = "open mpi";
    rank = "OMPI_COMM_WORLD_RANK", size = "OMPI_COMM_WORLD_SIZE";
    local = "OMPI_COMM_WORLD_LOCAL_RANK", local_size = "OMPI_COMM_WORLD_LOCAL_SIZE";
    id_var = "OMPI_MCA_ess_base_jobid";
  } else {
    e.launcher = "pmi";
    rank = r.opt("PMI_RANK") ? "PMI_RANK" : "PMIX_RANK", size = "PMI_SIZE";
    local = "MPI_LOCALRANKID", local_size = "MPI_LOCALNRANKS";
    id_var = r.opt("PMI_JOBID") ? "PMI_JOBID" : "PMIX_NAMESPACE";
  }
  e.rank = r.place(rank);
  e.world = r.count(size);
  e.world_var = size;
  e.local_rank = r.place(local);
  e.local_world = r.count(local_size);
  check_place(e, rank, size, local, local_size);
  e.nodes = (e.world + e.local_world - 1) / e.local_world;
  id = r.opt(id_var);
  if (id) e.job_id = *id;
  if (auto addr = r.opt("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else {
    FANOUT_CHECK(e.local_world == e.world, "a multi-process run under ", r.who, " on ",
                 plural(e.nodes, "node"),
                 " needs MASTER_ADDR: set it to the address of the host of rank 0 on every rank");
    e.master_addr = "127.0.0.1";
  }
  e.master_port = port_or_derived(r, id, id_var);
  if (id) e.secret = e.launcher + ":" + *id;
  return e;
}

}  // namespace

std::optional<std::string> env_lookup_process(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

bool launcher_env_found(const EnvLookup& get) {
  for (const char* name : {"FANOUT_LAUNCHER", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE",
                           "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (get(name)) return true;
  return false;
}

LauncherEnv launcher_env_read(const EnvLookup& get) {
  Reader any{get, ""};
  LauncherEnv e;
  if (auto l = any.opt("FANOUT_LAUNCHER")) {
    FANOUT_CHECK(*l == "fanout-launch", "bad FANOUT_LAUNCHER='", *l,
                 "' (fanout launch sets it to fanout-launch)");
    read_torch_names(Reader{get, "fanout launch"}, e);
    e.launcher = "fanout launch";
  } else if (auto run = any.opt("TORCHELASTIC_RUN_ID")) {
    Reader r{get, "torchrun"};
    read_torch_names(r, e);
    e.launcher = "torchrun";
    int restart =
        r.opt("TORCHELASTIC_RESTART_COUNT") ? r.num("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30) : 0;
    if (r.opt("GROUP_WORLD_SIZE")) e.nodes = r.count("GROUP_WORLD_SIZE");
    e.job_id = *run + "." + std::to_string(restart);
    auto agent = r.opt("TORCHELASTIC_USE_AGENT_STORE");
    e.torch_agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    e.torch_store_key = "fanout/" + *run + "/" + std::to_string(restart);
    // The static rendezvous' secret is random, from rank 0 through torchrun's store.
    if (!e.torch_agent_store) e.secret = "torchrun:" + e.job_id;
  } else if (any.opt("RANK") || any.opt("WORLD_SIZE")) {
    read_torch_names(Reader{get, "a launcher that sets RANK and WORLD_SIZE"}, e);
    e.launcher = "RANK/WORLD_SIZE";
  } else if (any.opt("OMPI_COMM_WORLD_RANK")) {
    e = read_mpi(Reader{get, "Open MPI"}, true);
  } else if ((any.opt("PMI_RANK") || any.opt("PMIX_RANK")) &&
             (any.opt("MPI_LOCALRANKID") || !any.opt("SLURM_PROCID"))) {
    e = read_mpi(Reader{get, "MPICH/PMI"}, false);
  } else if (any.opt("SLURM_PROCID")) {
    e = read_slurm(Reader{get, "slurm"});
  } else {
    detail::throw_error(detail::str_cat(
        "--strategy ddp found no launcher's variables in its environment (it recognises ", kLooked,
        "): start it with fanout launch --nproc-per-node 2 -- train --strategy ddp ..., torchrun, "
        "srun or mpirun"));
  }
  if (auto s = any.opt("FANOUT_JOB_SECRET")) e.secret = *s;
  std::string kind = e.launcher == "fanout launch"     ? "fanout-launch"
                     : e.launcher == "RANK/WORLD_SIZE" ? "env"
                     : e.launcher == "open mpi"        ? "ompi"
                                                       : e.launcher;
  e.job = kind + ":" + e.job_id + ":" + std::to_string(e.world);
  return e;
}

std::string launcher_line(const LauncherEnv& e) {
  std::string s = "fanout: launcher: " + e.launcher + " (";
  if (e.launcher == "torchrun") {
    size_t dot = e.job_id.rfind('.');  // "<run id>.<restart>"
    s += "run " + e.job_id.substr(0, dot) + ", restart " + e.job_id.substr(dot + 1) + ", ";
  } else if (!e.job_id.empty()) {
    s += "job " + e.job_id + ", ";
  }
  s += plural(e.world, "rank") + " on " + plural(e.nodes, "node") + ", ";
  std::string master = e.master_addr + ":" + std::to_string(e.master_port);
  if (e.torch_agent_store)
    s += "static rendezvous through torchrun's store at " + master + ")";
  else
    s += "master " + master + ")";
  return s;
}

// --- Slurm's and MPI's formats ----------------------------------------------

std::vector<std::string> slurm_hostlist_expand(const std::string& list, const std::string& what) {
  constexpr size_t kMaxHosts = 100000;
  auto bad = [&](const std::string& why) {
    detail::throw_error(detail::str_cat("bad ", what, "='", list, "' (", why, ")"));
  };
  std::vector<std::string> out;
  // Split at the commas outside brackets, then expand each item's bracket groups in turn.
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = at;
    int depth = 0;
    while (end < list.size() && !(list[end] == ',' && depth == 0)) {
      if (list[end] == '[' && depth++ > 0) bad("nested brackets");
      if (list[end] == ']' && --depth < 0) bad("a ']' without its '['");
      ++end;
    }
    if (depth != 0) bad("a '[' without its ']'");
    std::string item = list.substr(at, end - at);
    if (item.empty()) bad("an empty host name");
    std::vector<std::string> names{""};
    size_t i = 0;
    while (i < item.size()) {
      size_t open = item.find('[', i);
      std::string text = item.substr(i, open == std::string::npos ? std::string::npos : open - i);
      for (std::string& n : names) n += text;
      if (open == std::string::npos) break;
      size_t close = item.find(']', open);
      std::string ranges = item.substr(open + 1, close - open - 1);
      if (ranges.empty()) bad("empty brackets");
      std::vector<std::string> parts;
      size_t r = 0;
      while (r <= ranges.size()) {
        size_t comma = ranges.find(',', r);
        if (comma == std::string::npos) comma = ranges.size();
        std::string range = ranges.substr(r, comma - r);
        size_t dash = range.find('-');
        std::string lo = range.substr(0, dash);
        std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
        // Digits only, at most 9 of them: "01" is one, padded to two.
        auto digits = [](const std::string& s) {
          return s.size() <= 9 && number_problem(s, true, true, 0, 0, 0, 0, 999999999).empty();
        };
        if (!digits(lo) || !digits(hi)) bad("'" + range + "' is not a number or a range a-b");
        int64_t a = parse_whole_number(lo, 0, 999999999, what);
        int64_t b = parse_whole_number(hi, 0, 999999999, what);
        if (b < a) bad("the range '" + range + "' runs backwards");
        if (static_cast<size_t>(b - a + 1) * names.size() + out.size() > kMaxHosts)
          bad("more than 100000 hosts");
        for (int64_t k = a; k <= b; ++k) {
          std::string num = std::to_string(k);
          if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // "01-04"
          parts.push_back(num);
        }
        r = comma + 1;
      }
      std::vector<std::string> next;
      for (const std::string& n : names)
        for (const std::string& p : parts) next.push_back(n + p);
      names = std::move(next);
      i = close + 1;
    }
    out.insert(out.end(), names.begin(), names.end());
    at = end + 1;
  }
  return out;
}

std::vector<int> slurm_tasks_per_node(const std::string& value, const std::string& what) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= value.size()) {
    size_t comma = value.find(',', at);
    if (comma == std::string::npos) comma = value.size();
    std::string entry = value.substr(at, comma - at);
    // "2" or "2(x3)"
    size_t paren = entry.find("(x");
    std::string count = entry.substr(0, paren), times = "1";
    bool ok = !entry.empty();
    if (paren != std::string::npos) {
      ok = ok && entry.back() == ')';
      times = entry.substr(paren + 2, entry.size() - paren - 3);
    }
    auto whole = [](const std::string& s) {
      return number_problem(s, true, true, 0, 0, 0, 0, 999999).empty();
    };
    ok = ok && whole(count) && whole(times);
    FANOUT_CHECK(ok, "bad ", what, "='", value, "' (expected counts like 2(x3),1)");
    const int64_t n = parse_whole_number(count, 0, 999999, what);
    const int64_t k = parse_whole_number(times, 0, 999999, what);
    FANOUT_CHECK(n >= 1 && k >= 1 && out.size() + k <= 100000, "bad ", what, "='", value,
                 "' (counts and repeats must be at least 1, at most 100000 nodes)");
    out.insert(out.end(), static_cast<size_t>(k), static_cast<int>(n));
    at = comma + 1;
  }
  return out;
}

int port_from_job_id(const std::string& id, const std::string& what) {
  FANOUT_CHECK(!id.empty(), "bad ", what, "='' (an empty job id)");
  uint64_t h = 0;
  if (id.find_first_not_of("0123456789") == std::string::npos) {
    for (char c : id) h = (h * 10 + static_cast<uint64_t>(c - '0')) % 50000;
  } else {
    h = 1469598103934665603ull;  // FNV-1a
    for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h %= 50000;
  }
  return 10000 + static_cast<int>(h);
}

std::string random_secret() {
  unsigned char bytes[16];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  FANOUT_CHECK(fd >= 0, "cannot open /dev/urandom for the job secret: ", std::strerror(errno));
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::read(fd, bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  FANOUT_CHECK(got == sizeof bytes, "cannot read /dev/urandom for the job secret");
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) hex += {kHex[b >> 4], kHex[b & 15]};
  return hex;
}

}  // namespace fanout::distributed
