#pragma once
// Helpers for the multi-process (ddp, `fanout launch`) tests: the fanout binary
// started with fork/exec so a test holds its pid (to signal it, to run ranks side
// by side, to time each exit), a free loopback port, the tiny run every test
// trains, and readers for metrics.jsonl and the processes a run left behind.

#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/apps/fanout/checkpoint_util.h"

namespace fanout::test::ddp {

// One fanout process; stdout and stderr go to files in `log_dir`. `env` entries
// "NAME=value" are set in the child, entries without '=' are unset there. The
// destructor SIGKILLs and reaps a process that is still running.
class FanoutProcess {
 public:
  FanoutProcess(const std::vector<std::string>& args, const std::vector<std::string>& env,
                const std::string& log_dir, const std::string& name);
  ~FanoutProcess();
  FanoutProcess(const FanoutProcess&) = delete;
  FanoutProcess& operator=(const FanoutProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return running_; }
  // Reaps the process if it has exited; true once it has.
  bool poll();
  // Waits up to `timeout_s`; false (and the process still running) on timeout.
  bool wait(double timeout_s);
  void kill(int sig);
  // Exit code, or 128 + signal number (as a shell reports it); -1 while running.
  int rc() const { return rc_; }
  // Seconds from the start to the moment poll() saw the exit.
  double seconds() const;
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  bool running_ = false;
  int rc_ = -1;
  std::chrono::steady_clock::time_point start_, end_;
  std::string out_path_, err_path_;
};

// This process's environment with `env` applied: "NAME=value" entries set,
// entries without '=' unset (what a child started with them sees).
std::vector<std::string> child_environment(const std::vector<std::string>& env);

// No process of the run is alive (orphans would be reparented, so look by the
// env entry `marker`); a CHECK.
void check_no_process_left(const std::string& marker);

// Waits until every process has exited or `timeout_s` passed; true if all did.
bool wait_all(const std::vector<FanoutProcess*>& procs, double timeout_s);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// The env entries of rank `rank` of `world` ranks on this node (torchrun's names).
std::vector<std::string> rank_env(int rank, int world, int port);

// Non-empty lines of `text` that contain `phrase`.
std::vector<std::string> lines_with(const std::string& text, const std::string& phrase);

// A failure as every fanout error is one: a non-zero exit, exactly one non-empty
// stderr line, and every phrase in it (CHECKs).
void check_fails(int rc, const std::string& err, const std::vector<std::string>& phrases);
void check_fails(int rc, const std::string& err, std::initializer_list<std::string> phrases);
void check_fails(int rc, const std::string& err, const std::string& phrase);

// `train` flags for ddp over CPU devices, one per rank.
inline const std::vector<std::string> kDdp = {"--strategy", "ddp", "--devices", "cpu"};

// The "loss" of every training-step line of metrics.jsonl, in order, and the
// last "step" (0 if there is none).
std::vector<double> metrics_losses(const std::string& path);
// Every line's value of `key` ("grad_norm", ...), in order, where it has one.
std::vector<double> metrics_values(const std::string& path, const std::string& key);
int64_t metrics_last_step(const std::string& path);

// Pids of live processes whose environment holds `entry` ("NAME=value").
std::vector<pid_t> processes_with_env(const std::string& entry);

// The flat weights of DIR/model.safetensors (every tensor, in file order).
std::vector<float> weights_all(const std::string& dir);
// ||a - b|| / ||b||
double relative_l2(const std::vector<float>& a, const std::vector<float>& b);

// The tiny run every ddp test trains: a 2-layer Llama (vocab 259, hidden 32)
// initialised once into `init`, and a small text file; every run starts from
// the same weights through --init.
struct TinyRun {
  TempDir dir{"fanout-ddp"};
  std::string init = dir / "init", data = dir / "data.txt";
  TinyRun();
  // `train ... --init --data` with batch 6 x 16, lr 1e-2 constant, no saves or
  // evals, and `steps` steps into `out`.
  std::vector<std::string> train_args(const std::string& out, int64_t steps) const;
};

// `prefix` followed by `args`.
std::vector<std::string> concat(std::vector<std::string> prefix,
                                const std::vector<std::string>& args);

// What a run in `out` trained: per-step losses and pre-clip gradient norms
// (metrics.jsonl), and final/'s weights minus `init`.
struct Outcome {
  std::vector<double> losses, norms;
  std::vector<float> update;
};
Outcome outcome(const std::string& out, const std::vector<float>& init);
// got against ref (CHECKs): losses and norms per step within their relative
// tolerances, the update's relative L2 distance below update_tol.
void check_same(const Outcome& got, const Outcome& ref, double loss_tol = 1e-5,
                double update_tol = 1e-3, double norm_tol = 1e-5);

// `fanout <args>` exits with 0 (REQUIRE, its output in the message otherwise).
void train_ok(const std::vector<std::string>& args);

struct ResumeLeg {
  std::vector<std::string> first, second;
};
// A run in two legs: `first`'s flags for 3 steps of run.train_args, then
// `--resume final --steps 5` under `second`'s; what it trained equals an
// uninterrupted 5-step run from run.init on cpu:0. One leg per entry, each in
// its own directory under run.dir.
void check_resume_legs(const TinyRun& run, const std::vector<ResumeLeg>& legs);

}  // namespace fanout::test::ddp
