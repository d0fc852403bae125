#include "apps/bench/bench_ddp.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/train/ddp_env.h"
#include "engine/core/check.h"
#include "engine/core/json_parse.h"

extern char** environ;

namespace fanout::bench {

PrivateTempDir::PrivateTempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  FANOUT_CHECK(::mkdtemp(tmpl.data()) != nullptr, "cannot create a temporary directory in ",
               std::filesystem::temp_directory_path().string(), ": ", std::strerror(errno));
  path = tmpl;
}

PrivateTempDir::~PrivateTempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::vector<std::string> bench_ddp_launch_args(const std::vector<Device>& devices,
                                               const std::vector<std::string>& worker_flags,
                                               const std::string& json) {
  // The whole list, not a bare kind: a bare `cpu` would give rank 1 cpu:1 when the
  // list says cpu:0,cpu:0 (and a bare `cuda` a cuda:1 a one-GPU machine lacks).
  std::vector<std::string> args = {
      "launch",    "--nproc-per-node",  std::to_string(devices.size()), "--", "bench-worker",
      "--devices", devices_str(devices)};
  args.insert(args.end(), worker_flags.begin(), worker_flags.end());
  args.insert(args.end(), {"--json", json});
  return args;
}

nlohmann::json bench_result_json(const presentation::BenchResult& r) {
  nlohmann::json peaks = nlohmann::json::array();
  for (const auto& p : r.peaks) peaks.push_back(presentation::device_peak_json(p));
  // The timed steps summarised: samples, median, q1, q3, min, max (seconds).
  const nlohmann::json steps = {r.step.samples, r.step.median, r.step.q1,
                                r.step.q3,      r.step.min,    r.step.max};
  return {{"mode", r.mode},
          {"devices", r.devices},
          {"precision", r.precision},
          {"grad_comm", r.grad_comm},
          {"comm_bytes_per_step", {{"replicate", r.comm.replicate}, {"reduce", r.comm.reduce}}},
          {"tokens_per_s", r.tokens_per_s},
          {"step_s", r.step_s},
          {"step_times", steps},
          {"phases_s", bench_phases_json(r.phases)},
          {"peaks", peaks},
          {"host_bytes", r.host_bytes},
          {"last_loss", r.last_loss}};
}

std::string bench_first_error(const std::string& log, const std::vector<std::string>& prefixes) {
  std::istringstream in(log);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    for (const std::string& prefix : prefixes) {
      size_t at = line.find(prefix);
      if (at != std::string::npos) return line.substr(at + prefix.size());
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

std::string bench_ddp_label(const std::vector<Device>& devices) {
  return "ddp (" + std::to_string(devices.size()) +
         (devices.size() == 1 ? " process)" : " processes)");
}

presentation::BenchResult bench_ddp_run(const std::string& fanout,
                                        const std::vector<Device>& devices,
                                        const std::vector<std::string>& worker_flags) {
  // Before starting processes that would fail in ncclCommInitRank.
  train::ddp_check_distinct_gpus(devices);
  PrivateTempDir tmp("fanout-bench-ddp");
  const std::string out = tmp.path + "/ddp.json", log = tmp.path + "/ranks.log";
  std::vector<std::string> args = bench_ddp_launch_args(devices, worker_flags, out);
  args.insert(args.begin(), fanout);
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The ranks' stderr goes aside: a failure is one line in the table, not the ranks' story.
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  pid_t pid;
  int spawned = posix_spawn(&pid, fanout.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  FANOUT_CHECK(spawned == 0,
               "cannot start fanout launch for the ddp row: ", std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream log_in(log);
  const std::string ranks_said((std::istreambuf_iterator<char>(log_in)),
                               std::istreambuf_iterator<char>());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why =
        bench_first_error(ranks_said, {"fanout: error: ", "fanout: internal error: "});
    const std::string how =
        WIFEXITED(status)
            ? "fanout launch exited with " + std::to_string(WEXITSTATUS(status))
            : "fanout launch was killed by signal " + std::to_string(WTERMSIG(status));
    detail::throw_error(why.empty() ? how : why);
  }
  if (!ranks_said.empty()) std::fputs(ranks_said.c_str(), stderr);
  presentation::BenchResult r;
  r.mode = bench_ddp_label(devices);
  r.devices = devices_str(devices);
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    std::ifstream in(out + ".rank" + std::to_string(rank));
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    nlohmann::json j = json_parse_or_discarded(text);
    FANOUT_CHECK(!j.is_discarded(), "the ddp row's rank ", rank, " wrote no figures");
    if (rank == 0) {
      r.tokens_per_s = j["tokens_per_s"], r.step_s = j["step_s"], r.last_loss = j["last_loss"];
      r.precision = j["precision"], r.grad_comm = j["grad_comm"];
      r.comm = {j["comm_bytes_per_step"]["replicate"], j["comm_bytes_per_step"]["reduce"]};
      const auto& p = j["phases_s"];
      r.phases = {p["scatter"], p["replicate"], p["forward"], p["gather"],
                  p["loss"],    p["backward"],  p["reduce"],  p["optimizer"]};
      const auto& t = j["step_times"];
      r.step = {t[0], t[1], t[2], t[3], t[4], t[5]};
    }
    r.host_bytes += j.value("host_bytes", size_t{0});
    for (const auto& peak : j["peaks"]) {
      r.peaks.push_back(presentation::device_peak_from_json(peak));  // with each kind's peak
      r.peaks.back().device = "rank " + std::to_string(rank) + " " + r.peaks.back().device;
    }
  }
  return r;
}

}  // namespace fanout::bench
