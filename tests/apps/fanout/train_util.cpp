#include "tests/apps/fanout/train_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "tests/paths_util.h"

extern char** environ;

namespace fanout::test {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
}  // namespace

TrainFiles::TrainFiles(int documents) {
  file_write(config, R"({"vocab_size": 259, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
  const char* words[] = {"the",   "quick", "brown", "fox",  "jumps", "over",  "a",
                         "lazy",  "dog",   "pack",  "my",   "box",   "with",  "five",
                         "dozen", "jugs",  "of",    "milk", "and",   "honey."};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(words)) - 1);
  std::string text;
  for (int d = 0; d < documents; ++d) {
    std::string doc;
    while (doc.size() < 130) doc += std::string(doc.empty() ? "" : " ") + words[pick(rng)];
    text += doc + (d + 1 < documents ? "\n\n" : "\n");
  }
  file_write(data, text);
}

CliResult train_cli(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"train"};
  all.insert(all.end(), args.begin(), args.end());
  return run_fanout(all);
}

std::vector<nlohmann::json> metrics_read(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return lines;
}

std::vector<nlohmann::json> metrics_steps(const std::string& path) {
  std::vector<nlohmann::json> steps;
  for (nlohmann::json& j : metrics_read(path)) {
    if (j.is_object() && j.contains("loss")) steps.push_back(std::move(j));
  }
  return steps;
}

std::vector<std::string> dir_list(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

FlatWeights weights_concat(const std::string& dir) {
  FlatWeights w;
  for (HostTensor& t : weights_read(dir)) {
    w.names.push_back(t.name);
    w.values.insert(w.values.end(), t.data.begin(), t.data.end());
  }
  return w;
}

bool poll_until(const std::function<bool()>& done, double timeout_s) {
  auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// --- BackgroundTrain --------------------------------------------------------------

pid_t fanout_spawn(const std::vector<std::string>& args, const std::string& out,
                   const std::string& err) {
  const std::string binary = fanout_binary();
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // A test runner started in the background may ignore SIGINT; the child must not.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary.c_str(), &files, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw std::runtime_error("posix_spawn of fanout failed");
  return pid;
}

BackgroundTrain::BackgroundTrain(const std::vector<std::string>& args) {
  std::vector<std::string> train = {"train"};
  train.insert(train.end(), args.begin(), args.end());
  pid_ = fanout_spawn(train, logs_ / "out", logs_ / "err");
}

BackgroundTrain::~BackgroundTrain() {
  if (reaped_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

void BackgroundTrain::signal(int sig) const {
  if (!reaped_) ::kill(pid_, sig);
}

int BackgroundTrain::wait(double timeout_s) {
  if (reaped_) return code_;
  int status = 0;
  if (!poll_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout_s)) return -1;
  reaped_ = true;
  code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return code_;
}

std::string BackgroundTrain::out() const {
  return file_read(logs_ / "out");
}
std::string BackgroundTrain::err() const {
  return file_read(logs_ / "err");
}

// --- the PyTorch reference --------------------------------------------------------

int reference_run(const std::string& args, const std::string& work_dir, std::string& log) {
  std::string log_path = work_dir + "/reference.log";
  std::string cmd = reference_python() + " " + reference_script("llama_ref.py") + " " + args +
                    " >" + log_path + " 2>&1";
  int status = std::system(cmd.c_str());
  log = file_read(log_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace fanout::test
