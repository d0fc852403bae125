// `fanout launch`: torchrun for fanout. Starts --nproc-per-node copies of this
// binary with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set (and FANOUT_LAUNCHER, FANOUT_JOB_SECRET, FANOUT_RESTART_COUNT,
// FANOUT_MAX_RESTARTS), passes Ctrl-C and SIGTERM on to them (Note [Ctrl-C
// under launch]), and when one rank fails, says which and stops the others — no
// orphans (children die with the launcher) and no zombies (every child is waited
// for). With --max-restarts N it then starts every rank again, at most N times,
// as torchrun's elastic agent does, except after a usage error (exit code 2),
// which every restart would repeat. A launch inside another is refused.

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "engine/core/check.h"
#include "engine/distributed/launcher_env.h"
#include "engine/parallel/strategy.h"

namespace fanout::app {

namespace {
struct LaunchArgs {
  int nproc = 1, nnodes = 1, node_rank = 0, port = 0;
  int max_restarts = 0;     // torchrun's --max-restarts: whole-job restarts after a failure
  bool standalone = false;  // torchrun's --standalone: one node, a free port on this host
  std::string addr = "127.0.0.1";
  double grace = 15.0;
  std::vector<std::string> command;
};

// Note [Ctrl-C under launch]
// A terminal's Ctrl-C sends SIGINT to its whole foreground process group: to the
// launcher and to every rank at once. Forwarding it too gave each rank a second
// SIGINT, and a second signal stops a rank at once (Note [Stopping on a signal]
// in apps/train/stop_signals.cpp): no checkpoint, no curves. So one Ctrl-C stays one:
//   - a signal the kernel sent for a terminal (si_code SI_KERNEL) has reached
//     the ranks already, and the launcher does not forward it;
//   - any other first signal (kill of the launcher, or of its whole process
//     group) is forwarded once, as itself (SIGINT or SIGTERM), and a rank takes
//     a signal from its launcher that repeats one it already has as that one;
//   - a second signal to the launcher kills the ranks.
// The launcher exits 128 + the first signal (130, 143), as train does.
std::atomic<int> g_signals{0}, g_first_signal{0};
std::atomic<bool> g_from_terminal{false};  // the first signal came from a terminal
extern "C" void on_signal(int sig, siginfo_t* info, void*) {
  int none = 0;
  if (g_first_signal.compare_exchange_strong(none, sig))
    g_from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  ++g_signals;  // last: the loop that sees the count sees the rest
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
  // ddp, or a zero stage sharded over the processes: dp alone trains in one process.
  const std::optional<parallel::StrategyFlag> flag = parallel::strategy_flag_find(g);
  if (!flag || (!flag->processes && flag->strategy == parallel::Strategy::dp))
    return "launch runs multi-process training: 'train --strategy " + g + "' would start " + runs +
           "; use --strategy ddp, zero1, zero2 or zero3";
  return "";
}

// --max-restarts restarts `train` from its newest checkpoint only if the command
// says so (--resume auto); otherwise every restart would start over, or be
// refused for a non-empty --out. "" if it does.
std::string train_restart_problem(const std::vector<std::string>& command) {
  if (command.empty() || command[0] != "train") return "";
  for (size_t i = 1; i < command.size() && command[i] != "--"; ++i) {
    if ((command[i] == "--resume" && i + 1 < command.size() && command[i + 1] == "auto") ||
        command[i] == "--resume=auto")
      return "";
  }
  return "--max-restarts restarts every rank with the same command: add --resume auto (and "
         "--save-every N) to the train command so that a restart continues from the newest "
         "checkpoint in --out";
}

// What the ranks of one attempt share.
struct AttemptEnv {
  int port = 0, restart = 0;
  std::string secret;
};

enum class Ending { ok, failed, usage_error, interrupted };
struct AttemptResult {
  Ending ending = Ending::ok;
  int exit_code = 0;
};

// Starts every rank of this node and waits for all of them; on the first failure
// prints one line (ending in `restart_words` when a restart will follow) and
// stops the others: the grace period, then SIGKILL.
AttemptResult run_attempt(LaunchArgs& a, const std::string& self, const AttemptEnv& env,
                          const std::string& restart_words) {
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
      setenv("MASTER_PORT", std::to_string(env.port).c_str(), 1);
      setenv("FANOUT_LAUNCHER", "fanout-launch", 1);
      setenv("FANOUT_JOB_SECRET", env.secret.c_str(), 1);
      // As torchrun's TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS.
      setenv("FANOUT_RESTART_COUNT", std::to_string(env.restart).c_str(), 1);
      setenv("FANOUT_MAX_RESTARTS", std::to_string(a.max_restarts).c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(self.c_str())};
      for (std::string& s : a.command) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      std::fprintf(stderr, "fanout launch: cannot start rank %d: %s\n", rank, std::strerror(errno));
      _exit(127);
    }
    pids[local] = pid;
    alive[local] = true;
  }

  // Wait for every child; react to the first failure and to Ctrl-C.
  using Clock = std::chrono::steady_clock;
  AttemptResult result;
  int signalled = 0, live = a.nproc;  // signals the launcher has acted on
  bool stopping = false;
  Clock::time_point kill_at = Clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (int i = 0; i < a.nproc; ++i)
      if (alive[i]) ::kill(pids[i], sig);
  };
  while (live > 0) {
    int seen = g_signals.load();
    if (seen > signalled) {
      // The first signal: the ranks finish their step and checkpoint (Note [Ctrl-C
      // under launch]); a second: kill.
      if (seen > 1)
        signal_all(SIGKILL);
      else if (!g_from_terminal)
        signal_all(g_first_signal);
      signalled = seen;
      if (result.exit_code == 0) result.exit_code = 128 + g_first_signal;
      if (result.ending == Ending::ok) result.ending = Ending::interrupted;
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
    // A rank that took Ctrl-C or SIGTERM exits 130 or 143 after its checkpoint;
    // after a signal, one that had not yet installed its handler dies of it.
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const bool stopped = code == 128 + SIGINT || code == 128 + SIGTERM;
    bool ok = code == 0 || stopped ||
              (signalled > 0 && WIFSIGNALED(status) &&
               (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM));
    if (stopped && result.exit_code == 0) {  // a signal sent to the ranks alone
      result.exit_code = code;
      result.ending = Ending::interrupted;
    }
    if (!ok && !stopping) {
      int rank = a.node_rank * a.nproc + local;
      const bool usage_error = code == 2;  // the command line is wrong: a restart repeats it
      std::string then = "stopping the other ranks";
      if (signalled == 0 && usage_error && a.max_restarts > 0) {
        then += " (not restarting: exit code 2 is a usage error, which every restart would repeat)";
      } else if (signalled == 0 && !restart_words.empty()) {
        then = restart_words;
      } else if (signalled == 0 && a.max_restarts > 0) {
        then += " (no restart left: --max-restarts " + std::to_string(a.max_restarts) + ")";
      }
      std::fprintf(stderr, "fanout launch: rank %d %s; %s\n", rank, describe(status).c_str(),
                   then.c_str());
      stopping = true;
      result.exit_code = usage_error ? 2 : 1;
      if (signalled == 0) result.ending = usage_error ? Ending::usage_error : Ending::failed;
      // The others notice through their collectives and say so themselves; any
      // still running after the grace period are killed.
      kill_at = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.grace));
    }
  }
  return result;
}

int run_launch(LaunchArgs a) {
  // Its ranks carry the launcher's marker: a launch there would start ranks of ranks.
  const char* outer = std::getenv("FANOUT_LAUNCHER");
  FANOUT_CHECK(outer == nullptr || outer[0] == '\0',
               "fanout launch cannot run inside another launch (FANOUT_LAUNCHER=",
               outer == nullptr ? "" : outer,
               " says this process is a rank of one): start every rank from one launch, or unset "
               "FANOUT_LAUNCHER if it is left over");
  FANOUT_CHECK(a.command.empty() || a.command[0] != "launch",
               "launch -- launch would start a launcher as each rank: give the command every rank "
               "runs, e.g. fanout launch --nproc-per-node 2 -- train --strategy ddp");
  FANOUT_CHECK(a.nproc >= 1, "--nproc-per-node must be at least 1");
  FANOUT_CHECK(!a.addr.empty(), "--master-addr: an empty value is not an address");
  FANOUT_CHECK(a.nnodes >= 1, "--nnodes must be at least 1");
  FANOUT_CHECK(a.node_rank >= 0 && a.node_rank < a.nnodes, "--node-rank must be in [0, --nnodes)");
  const int64_t world = int64_t{a.nproc} * a.nnodes;
  FANOUT_CHECK(world <= distributed::kMaxWorldSize, "--nproc-per-node ", a.nproc, " x --nnodes ",
               a.nnodes, " = ", world, " ranks is more than one fanout job holds (at most ",
               distributed::kMaxWorldSize,
               ": rank 0's rendezvous keeps a connection to every rank)");
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
  if (a.max_restarts > 0) {
    FANOUT_CHECK(a.nnodes == 1, "--max-restarts restarts the ranks of one node: with --nnodes ",
                 a.nnodes,
                 " every node would have to restart together, which needs a rendezvous between "
                 "the launchers that fanout launch does not have; drop --max-restarts");
    std::string restart_problem = train_restart_problem(a.command);
    FANOUT_CHECK(restart_problem.empty(), restart_problem);
  }
  const bool auto_port = a.port == 0;
  if (auto_port)
    FANOUT_CHECK(a.nnodes == 1, "a multi-node launch needs --master-port (the same on every node)");
  FANOUT_CHECK(auto_port || a.port < 65536, "--master-port ", a.port, " is not a port number");
  // Every rank of a job carries the same FANOUT_JOB_SECRET, for the rendezvous to
  // tell its ranks from strangers. Several nodes must agree on it, so there it comes
  // from the environment; one node makes its own, new for each attempt.
  const char* given_secret = std::getenv("FANOUT_JOB_SECRET");
  const bool has_secret = given_secret != nullptr && given_secret[0] != '\0';
  FANOUT_CHECK(has_secret || a.nnodes == 1,
               "a multi-node launch needs the same FANOUT_JOB_SECRET on every node, e.g. "
               "export FANOUT_JOB_SECRET=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n')");
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  FANOUT_CHECK(n > 0, "cannot find the fanout binary: ", std::strerror(errno));
  self[n] = '\0';

  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  for (int restart = 0;; ++restart) {
    AttemptEnv env;
    env.restart = restart;
    env.port = auto_port ? free_port() : a.port;  // a fresh port for every attempt
    env.secret = has_secret ? std::string(given_secret) : distributed::random_secret();
    std::string words;
    if (restart < a.max_restarts)
      words = "restarting every rank (restart " + std::to_string(restart + 1) + " of " +
              std::to_string(a.max_restarts) + ")";
    AttemptResult r = run_attempt(a, self, env, words);
    if (r.ending != Ending::failed || words.empty()) return r.exit_code;  // usage errors too
    if (g_signals.load() > 0) {  // a Ctrl-C, even one while the ranks were stopping, never restarts
      std::fprintf(stderr,
                   "fanout launch: interrupted while the ranks were stopping; not "
                   "restarting\n");
      return r.exit_code;
    }
  }
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
  add_number(cmd, "--max-restarts,--max_restarts", a->max_restarts,
             "Restart every rank after a failure, at most this many times (train: with --resume "
             "auto)",
             0, 1000000);
  cmd->add_option("command", a->command, "The fanout command each rank runs (after --)");
  return [cmd, a]() -> int { return cmd->parsed() ? run_launch(*a) : -1; };
}

}  // namespace fanout::app
