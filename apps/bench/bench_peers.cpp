#include "apps/bench/bench_peers.h"

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/bench/bench_ddp.h"
#include "engine/core/check.h"
#include "engine/core/json_parse.h"

namespace fanout::bench {

namespace {
// `s` as one word for /bin/sh (a config path with a space or a quote stays one).
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The CUDA_VISIBLE_DEVICES entries that are fanout's cuda:N for each N in `indices`.
std::string cuda_visible(const std::vector<int>& indices, const char* inherited) {
  std::vector<std::string> entries;
  std::stringstream ss(inherited ? inherited : "");
  for (std::string e; std::getline(ss, e, ',');) entries.push_back(e);
  std::string out;
  for (int i : indices) {
    out += out.empty() ? "" : ",";
    out += static_cast<size_t>(i) < entries.size() ? entries[i] : std::to_string(i);
  }
  return out;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

std::vector<PeerPlan> bench_peers_plan(const std::vector<Device>& devices, const char* inherited) {
  FANOUT_ASSERT(!devices.empty());
  const bool cuda = devices[0].is_cuda();
  const std::string n = std::to_string(devices.size());
  const bool one = devices.size() == 1;
  std::vector<int> indices;
  std::string twice;  // the first device listed twice
  for (size_t i = 0; i < devices.size(); ++i) {
    indices.push_back(devices[i].index);
    if (twice.empty() && std::count(devices.begin(), devices.begin() + i, devices[i]) > 0)
      twice = devices[i].str();
  }
  const std::string first = cuda ? cuda_visible({devices[0].index}, inherited) : "";
  const std::string all = cuda ? cuda_visible(indices, inherited) : "";
  std::vector<PeerPlan> plans = {
      {"PyTorch eager", "--mode single", first, ""},
      {"PyTorch torch.compile", "--mode single --compile", first, ""},
  };
  // Processes on CPU devices share the cores however they are numbered; GPUs do not.
  const std::string backend = cuda ? "nccl" : "gloo";
  plans.push_back({"PyTorch DDP (" + backend + ", " + n + (one ? " process)" : " processes)"),
                   "--mode ddp --backend " + backend + " --nproc " + n, all,
                   cuda && !twice.empty()
                       ? "nccl puts one process on each GPU, and " + twice + " is listed twice"
                       : ""});
  if (cuda) {
    plans.push_back(
        {"PyTorch nn.DataParallel (" + n + (one ? " GPU)" : " GPUs)"), "--mode dp --nproc " + n,
         all, twice.empty() ? "" : "it needs distinct GPUs, and " + twice + " is listed twice"});
  }
  return plans;
}

std::string bench_peers_python() {
  std::vector<std::string> candidates = {"/usr/bin/python3", "python3"};
  if (const char* chosen = std::getenv("FANOUT_PYTHON"); chosen && *chosen)
    candidates.insert(candidates.begin(), shell_quote(chosen));
  for (const std::string& py : candidates) {
    std::string cmd = py + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

std::vector<PeerRow> bench_peers_run(const PeerRequest& q, const std::vector<Device>& devices) {
  std::string cannot;  // why no peer can run here
  if (q.python.empty()) {
    cannot = "no python3 that imports torch was found";
  } else if (!std::filesystem::exists(q.script)) {
    cannot = "cannot find " + q.script + " (set FANOUT_REFERENCE_DIR)";
  }
  const bool cuda = devices[0].is_cuda();
  std::vector<PeerRow> out;
  PrivateTempDir tmp("fanout-peer");
  const std::string json = tmp.path + "/peer.json", err = tmp.path + "/peer.err";
  for (const std::string& precision : q.precisions) {
    const std::string how = precision == "bf16" ? ", bf16 autocast" : ", fp32";
    for (const PeerPlan& p : bench_peers_plan(devices, std::getenv("CUDA_VISIBLE_DEVICES"))) {
      PeerRow row;
      row.label = p.label + how, row.precision = precision;
      if (!cannot.empty() || !p.skip.empty()) {
        row.status = "skipped", row.reason = cannot.empty() ? p.skip : cannot;
        out.push_back(row);
        continue;
      }
      std::string cmd =
          (p.cuda_visible.empty() ? "" : "CUDA_VISIBLE_DEVICES=" + p.cuda_visible + " ") +
          q.python + " " + shell_quote(q.script) + " --config " + shell_quote(q.config) +
          " --batch-size " + std::to_string(q.batch_size) + " --seq-len " +
          std::to_string(q.seq_len) + " --steps " + std::to_string(q.steps) + " --warmup " +
          std::to_string(q.warmup) + " --device " + (cuda ? "cuda" : "cpu") + " " + p.flags +
          " --precision " + precision + " --json " + shell_quote(json) + " >/dev/null 2>" +
          shell_quote(err);
      std::filesystem::remove(json);
      const int status = std::system(cmd.c_str());
      const int rc = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      // Ctrl-C reached the peer, not this process (system() ignores it meanwhile).
      FANOUT_CHECK(
          !(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) && rc != 130,
          "interrupted while running the PyTorch peers");
      const std::string said = bench_first_error(file_text(err), {"peer_bench: error: "});
      nlohmann::json j = json_parse_or_discarded(file_text(json));
      if (rc == 0 && !j.is_discarded() && j.contains("tokens_per_s")) {
        row.label += ", torch " + j.value("torch", std::string("?"));
        row.tokens_per_s = j["tokens_per_s"];
      } else if (rc == 2) {  // peer_bench.py: it cannot run with these flags or this PyTorch
        row.status = "skipped", row.reason = said.empty() ? "peer_bench.py refused" : said;
      } else {
        row.status = "failed", row.reason = said;
        if (said.empty() && rc == 0) row.reason = "peer_bench.py wrote no figures";
        if (said.empty() && rc > 0) row.reason = "peer_bench.py exited with " + std::to_string(rc);
        if (said.empty() && rc < 0) row.reason = "peer_bench.py did not exit normally";
      }
      out.push_back(row);
    }
  }
  return out;
}

}  // namespace fanout::bench
