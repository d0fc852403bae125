// `fanout launch`: torchrun for fanout. Starts --nproc-per-node copies of this
// binary with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set, forwards Ctrl-C to them, and when one rank fails, says which
// and stops the others — no orphans (children die with the launcher) and no
// zombies (every child is waited for).

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "engine/core/check.h"

namespace fanout::app {

namespace {
struct LaunchArgs {
  int nproc = 1, nnodes = 1, node_rank = 0, port = 0;
  bool standalone = false;  // torchrun's --standalone: one node, a free port on this host
  std::string addr = "127.0.0.1";
  double grace = 15.0;
  std::vector<std::string> command;
};

std::atomic<int> g_signals{0};
extern "C" void on_signal(int) {
  ++g_signals;
}

// A free TCP port on this machine (single-node runs without --master-port).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  FANOUT_CHECK(fd >= 0, "cannot create a socket: ", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  socklen_t len = sizeof sa;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  ::close(fd);
  FANOUT_CHECK(ok, "cannot find a free port: ", std::strerror(errno));
  return ntohs(sa.sin_port);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped";
}

// Every rank of `launch -- train` must run a multi-process strategy (ddp, or
// zero1/zero2/zero3 sharded over the ranks): with dp each process would train
// alone, all on one --out. "" if it does.
std::string train_strategy_problem(const std::vector<std::string>& command, int nproc) {
  if (command.empty() || command[0] != "train") return "";
  std::vector<std::string> given;
  for (size_t i = 1; i < command.size() && command[i] != "--"; ++i) {
    const std::string& arg = command[i];
    if (arg == "--strategy") {
      bool has_value = i + 1 < command.size() && command[i + 1].rfind("-", 0) != 0;
      given.push_back(has_value ? command[++i] : "");
    } else if (arg.rfind("--strategy=", 0) == 0)
      given.push_back(arg.substr(std::string("--strategy=").size()));
  }
  std::string runs = nproc == 1 ? "a run that is not ddp"
                                : std::to_string(nproc) + " independent runs on one --out";
  if (given.size() > 1) {
    std::string list;
    for (const auto& g : given) {
      if (!list.empty()) list += ", ";
      list += "'" + g + "'";
    }
    return "launch runs multi-process training: --strategy is given " +
           std::to_string(given.size()) + " times (" + list +
           "); give it once (ddp, zero1, zero2 or zero3)";
  }
  if (given.empty())
    return "launch runs multi-process training: 'train' without --strategy would start " + runs +
           "; add --strategy ddp (or zero1, zero2, zero3)";
  if (given[0].empty())
    return "launch runs multi-process training: 'train --strategy' has no value; add --strategy "
           "ddp (or zero1, zero2, zero3)";
  const std::string& g = given[0];
  if (g != "ddp" && g != "zero1" && g != "zero2" && g != "zero3")
    return "launch runs multi-process training: 'train --strategy " + g + "' would start " + runs +
           "; use --strategy ddp, zero1, zero2 or zero3";
  return "";
}

int run_launch(LaunchArgs a) {
  FANOUT_CHECK(a.nproc >= 1, "--nproc-per-node must be at least 1");
  FANOUT_CHECK(!a.addr.empty(), "--master-addr: an empty value is not an address");
  FANOUT_CHECK(a.nnodes >= 1, "--nnodes must be at least 1");
  FANOUT_CHECK(a.node_rank >= 0 && a.node_rank < a.nnodes, "--node-rank must be in [0, --nnodes)");
  FANOUT_CHECK(!a.command.empty(),
               "give the command to run after --, e.g. "
               "fanout launch --nproc-per-node 2 -- train --strategy ddp");
  std::string strategy_problem = train_strategy_problem(a.command, a.nproc);
  FANOUT_CHECK(strategy_problem.empty(), strategy_problem);
  if (a.standalone) {
    FANOUT_CHECK(a.nnodes == 1, "--standalone runs one node; it does not combine with --nnodes ",
                 a.nnodes);
    FANOUT_CHECK(a.port == 0, "--standalone picks a free port itself; drop --master-port");
  }
  if (a.port == 0) {
    FANOUT_CHECK(a.nnodes == 1, "a multi-node launch needs --master-port (the same on every node)");
    a.port = free_port();
  }
  FANOUT_CHECK(a.port > 0 && a.port < 65536, "--master-port ", a.port, " is not a port number");
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  FANOUT_CHECK(n > 0, "cannot find the fanout binary: ", std::strerror(errno));
  self[n] = '\0';

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  int world = a.nproc * a.nnodes;
  std::vector<pid_t> pids(a.nproc, -1);
  std::vector<bool> alive(a.nproc, false);
  for (int local = 0; local < a.nproc; ++local) {
    int rank = a.node_rank * a.nproc + local;
    pid_t pid = ::fork();
    FANOUT_CHECK(pid >= 0, "cannot start rank ", rank, ": ", std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans if the launcher dies
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("MASTER_ADDR", a.addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(a.port).c_str(), 1);
      std::vector<char*> argv{self};
      for (std::string& s : a.command) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(self, argv.data());
      std::fprintf(stderr, "fanout launch: cannot start rank %d: %s\n", rank, std::strerror(errno));
      _exit(127);
    }
    pids[local] = pid;
    alive[local] = true;
  }

  // Wait for every child; react to the first failure and to Ctrl-C.
  using Clock = std::chrono::steady_clock;
  int exit_code = 0, forwarded = 0, live = a.nproc;
  bool stopping = false;
  Clock::time_point kill_at = Clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (int i = 0; i < a.nproc; ++i)
      if (alive[i]) ::kill(pids[i], sig);
  };
  while (live > 0) {
    int seen = g_signals.load();
    if (seen > forwarded) {
      // First Ctrl-C: the ranks finish their step and checkpoint; a second: kill.
      signal_all(seen == 1 ? SIGINT : SIGKILL);
      forwarded = seen;
      if (exit_code == 0) exit_code = 130;
      kill_at = std::min(kill_at, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(a.grace)));
    }
    if (Clock::now() >= kill_at) signal_all(SIGKILL);
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int local = -1;
    for (int i = 0; i < a.nproc; ++i)
      if (pids[i] == pid) local = i;
    if (local < 0) continue;
    alive[local] = false;
    --live;
    // After a forwarded Ctrl-C, a rank that had not yet installed its handler dies of SIGINT.
    bool ok = (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 130)) ||
              (forwarded > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
    if (!ok && !stopping) {
      int rank = a.node_rank * a.nproc + local;
      std::fprintf(stderr, "fanout launch: rank %d %s; stopping the other ranks\n", rank,
                   describe(status).c_str());
      stopping = true;
      exit_code = 1;
      // The others notice through their collectives and say so themselves; any
      // still running after the grace period are killed.
      kill_at = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.grace));
    }
  }
  return exit_code;
}
}  // namespace

Command add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Start one fanout process per device with torchrun's variables (ddp)");
  auto a = std::make_shared<LaunchArgs>();
  // Bounds: a process per device (1024 covers any node), a port number or 0 (free).
  // torchrun's spellings (--nproc_per_node, ...) are accepted too.
  add_number(cmd, "--nproc-per-node,--nproc_per_node", a->nproc, "Processes on this node", 1, 1024);
  add_number(cmd, "--nnodes", a->nnodes, "Nodes in the run", 1, 65536);
  add_number(cmd, "--node-rank,--node_rank", a->node_rank, "This node's index", 0, 65535);
  cmd->add_option("--master-addr,--master_addr", a->addr, "Address of rank 0")
      ->capture_default_str();
  add_number(cmd, "--master-port,--master_port", a->port,
             "Port of rank 0 (0: a free one, single node)", 0, 65535);
  cmd->add_flag("--standalone", a->standalone,
                "One node on a free local port (torchrun's --standalone; the default here)");
  add_number(cmd, "--grace", a->grace, "Seconds the ranks get to stop before they are killed", 0.0,
             1e6);
  cmd->add_option("command", a->command, "The fanout command each rank runs (after --)");
  return [cmd, a]() -> int { return cmd->parsed() ? run_launch(*a) : -1; };
}

}  // namespace fanout::app
