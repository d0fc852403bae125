#include "tests/apps/fanout/launch_util.h"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/apps/fanout/cli_runner.h"
#include "tests/paths_util.h"

extern char** environ;

namespace fanout::test::ddp {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The text of every tiny run: seven pangrams, numbered so lines differ.
std::string tiny_text() {
  const char* lines[] = {
      "The quick brown fox jumps over the lazy dog.", "Pack my box with five dozen liquor jugs.",
      "How vexingly quick daft zebras jump!",         "Sphinx of black quartz, judge my vow.",
      "The five boxing wizards jump quickly.",        "Jackdaws love my big sphinx of quartz.",
      "Waltz, bad nymph, for quick jigs vex."};
  std::string text;
  for (int i = 0; i < 42; ++i) {
    text += std::to_string(i) + " " + lines[i % 7] + "\n";
    if (i % 5 == 4) text += "\n";  // a blank line ends a document
  }
  return text;
}
}  // namespace

std::vector<std::string> child_environment(const std::vector<std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  for (const std::string& entry : env) {
    size_t eq = entry.find('=');
    std::string key = entry.substr(0, eq) + "=";
    std::erase_if(envs, [&](const std::string& s) { return s.rfind(key, 0) == 0; });
    if (eq != std::string::npos) envs.push_back(entry);
  }
  return envs;
}

void check_no_process_left(const std::string& marker) {
  std::vector<pid_t> left;
  for (int i = 0; i < 100; ++i) {  // a rank killed a moment ago may still be exiting
    left = processes_with_env(marker);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(left.empty());
}

// --- FanoutProcess ------------------------------------------------------------

FanoutProcess::FanoutProcess(const std::vector<std::string>& args,
                             const std::vector<std::string>& env, const std::string& log_dir,
                             const std::string& name)
    : out_path_(log_dir + "/" + name + ".out"), err_path_(log_dir + "/" + name + ".err") {
  // Everything the child needs is built before fork: after it, only exec.
  std::vector<std::string> envs = child_environment(env);
  std::vector<char*> envp, argv;
  for (std::string& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string binary = fanout_binary();
  std::vector<std::string> argv_s = args;
  argv.push_back(binary.data());
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || out < 0 || err < 0) throw std::runtime_error("cannot open the logs in " + log_dir);
  start_ = Clock::now();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(in, 0), ::dup2(out, 1), ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(in), ::close(out), ::close(err);
  if (pid_ < 0) throw std::runtime_error("fork failed");
  running_ = true;
}

FanoutProcess::~FanoutProcess() {
  if (running_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

bool FanoutProcess::poll() {
  if (!running_) return true;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  end_ = Clock::now();
  running_ = false;
  rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

bool FanoutProcess::wait(double timeout_s) {
  return wait_all({this}, timeout_s);
}

void FanoutProcess::kill(int sig) {
  if (running_) ::kill(pid_, sig);
}

double FanoutProcess::seconds() const {
  return std::chrono::duration<double>((running_ ? Clock::now() : end_) - start_).count();
}

std::string FanoutProcess::out() const {
  return file_read(out_path_);
}
std::string FanoutProcess::err() const {
  return file_read(err_path_);
}

bool wait_all(const std::vector<FanoutProcess*>& procs, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  while (true) {
    bool all = true;
    for (FanoutProcess* p : procs) all &= p->poll();
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// --- ports, env, text -----------------------------------------------------------

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free port");
  return ntohs(sa.sin_port);
}

std::vector<std::string> rank_env(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(world),
          "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port)};
}

std::vector<std::string> lines_with(const std::string& text, const std::string& phrase) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.find(phrase) != std::string::npos) out.push_back(line);
  return out;
}

void check_fails(int rc, const std::string& err, const std::vector<std::string>& phrases) {
  INFO("rc " << rc << " stderr: " << err);
  CHECK(rc != 0);
  CHECK(lines_with(err, "").size() == 1);
  for (const std::string& p : phrases) CHECK(err.find(p) != std::string::npos);
}

void check_fails(int rc, const std::string& err, std::initializer_list<std::string> phrases) {
  check_fails(rc, err, std::vector<std::string>(phrases));
}

void check_fails(int rc, const std::string& err, const std::string& phrase) {
  check_fails(rc, err, std::vector<std::string>{phrase});
}

std::vector<std::string> concat(std::vector<std::string> prefix,
                                const std::vector<std::string>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

// --- run outputs ----------------------------------------------------------------

std::vector<double> metrics_values(const std::string& path, const std::string& key) {
  std::vector<double> out;
  std::istringstream in(file_read(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains(key)) out.push_back(j[key].get<double>());
  }
  return out;
}

std::vector<double> metrics_losses(const std::string& path) {
  return metrics_values(path, "loss");
}

int64_t metrics_last_step(const std::string& path) {
  int64_t step = 0;
  std::istringstream in(file_read(path));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step")) step = j["step"].get<int64_t>();
  }
  return step;
}

std::vector<pid_t> processes_with_env(const std::string& entry) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const fs::directory_entry& d : fs::directory_iterator("/proc", ec)) {
    std::string name = d.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // environ is NUL-separated; unreadable (another user's, or gone) reads empty.
    std::string env = file_read(d.path().string() + "/environ");
    size_t at = 0;
    while (at < env.size()) {
      size_t end = env.find('\0', at);
      if (end == std::string::npos) end = env.size();
      if (env.compare(at, end - at, entry) == 0) {
        out.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
      at = end + 1;
    }
  }
  return out;
}

std::vector<float> weights_all(const std::string& dir) {
  std::vector<float> out;
  for (const HostTensor& t : weights_read(dir)) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::sqrt(ref);
}

// --- the tiny run ---------------------------------------------------------------

TinyRun::TinyRun() {
  models::LlamaConfig c = cli_test_config();
  c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  c.max_position_embeddings = 64;
  fs::create_directory(init);
  checkpoint_write(init, c, 7);
  file_write(data, tiny_text());
}

std::vector<std::string> TinyRun::train_args(const std::string& out, int64_t steps) const {
  return {"train",
          "--init",
          init,
          "--data",
          data,
          "--batch-size",
          "6",
          "--seq-len",
          "16",
          "--steps",
          std::to_string(steps),
          "--save-every",
          "0",
          "--eval-every",
          "0",
          "--lr",
          "1e-2",
          "--warmup",
          "0",
          "--schedule",
          "constant",
          "--out",
          out};
}

void train_ok(const std::vector<std::string>& args) {
  CliResult r = run_fanout(args);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
}

void check_resume_legs(const TinyRun& run, const std::vector<ResumeLeg>& legs) {
  const std::vector<float> init = weights_all(run.init);
  const std::string straight = run.dir / "straight";
  train_ok(concat(run.train_args(straight, 5), {"--devices", "cpu:0"}));
  const Outcome ref = outcome(straight, init);
  int n = 0;
  for (const ResumeLeg& leg : legs) {
    CAPTURE(n);
    const std::string out = run.dir / ("leg" + std::to_string(n++));
    train_ok(concat(run.train_args(out, 3), leg.first));
    CliResult second =
        run_fanout(concat({"train", "--resume", out + "/final", "--steps", "5"}, leg.second));
    INFO("resume stderr: " << second.err);
    REQUIRE(second.rc == 0);
    check_same(outcome(out, init), ref);
  }
}

Outcome outcome(const std::string& out, const std::vector<float>& init) {
  Outcome o{metrics_losses(out + "/metrics.jsonl"),
            metrics_values(out + "/metrics.jsonl", "grad_norm"), weights_all(out + "/final")};
  for (size_t i = 0; i < o.update.size() && i < init.size(); ++i) o.update[i] -= init[i];
  return o;
}

void check_same(const Outcome& got, const Outcome& ref, double loss_tol, double update_tol,
                double norm_tol) {
  REQUIRE(got.losses.size() == ref.losses.size());
  REQUIRE(got.norms.size() == ref.norms.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= loss_tol * std::abs(ref.losses[i]));
    CHECK(std::abs(got.norms[i] - ref.norms[i]) <= norm_tol * std::abs(ref.norms[i]));
  }
  REQUIRE(got.update.size() == ref.update.size());
  CHECK(relative_l2(got.update, ref.update) < update_tol);
}

}  // namespace fanout::test::ddp
