// The README's examples as a new user meets them: the block marked
// `<!-- test_readme_examples: examples -->` is read from README.md (never a copy)
// and every line of it runs, in order, as one bash script in a temporary folder
// laid out as the repository's root: README.md and docs/*.md copied from the
// source tree, build/apps/fanout/fanout a link to the binary under test (so the
// block's own `export PATH=$PWD/build/apps/fanout:$PATH` finds it). The torchrun
// line (`<!-- test_readme_examples: torchrun -->`) runs the same way, skipped only
// where torch is missing.
//
// The one substitution, to fit a test's time: every `--steps N`, `--save-every N`
// and `--eval-every N` becomes ceil(N / 50) (300 steps run as 6, a resume from 300
// to 400 as 6 to 8). Under AddressSanitizer (tenfold slower) every train line also
// measures its held-out loss over 2 batches (--val-batches 2): the embedded corpus's
// 13 took about a minute a run there, and the block ran past ctest's timeout.
// FANOUT_README runs the test on another README.

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"
#include "tests/paths_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

constexpr int64_t kStepDivisor = 50;

std::string readme_path() {
  return env_or("FANOUT_README", std::string(FANOUT_SOURCE_DIR) + "/README.md");
}

// The commands of the ```sh block after `<!-- test_readme_examples: NAME -->`:
// continuation lines joined, blank and comment-only lines left out.
std::vector<std::string> readme_block(const std::string& name) {
  const std::string text = file_read(readme_path());
  const std::string marker = "<!-- test_readme_examples: " + name + " -->\n```sh\n";
  const size_t at = text.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, readme_path(), " has no '",
                  marker.substr(0, marker.find('\n')), "' line before a ```sh block");
  const size_t begin = at + marker.size(), end = text.find("\n```", begin - 1);
  REQUIRE_MESSAGE(end != std::string::npos, "the ", name, " block of ", readme_path(),
                  " never ends");
  std::vector<std::string> lines;
  std::string pending;
  size_t pos = begin;
  while (pos < end + 1) {
    const size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const bool continued = !line.empty() && line.back() == '\\';
    if (continued) line.pop_back();
    if (!pending.empty()) line.erase(0, line.find_first_not_of(' '));
    pending += line;
    if (continued) continue;
    const size_t first = pending.find_first_not_of(' ');
    if (first != std::string::npos && pending[first] != '#') lines.push_back(pending);
    pending.clear();
  }
  REQUIRE_MESSAGE(!lines.empty(), "the ", name, " block of ", readme_path(), " is empty");
  return lines;
}

// The documented substitution: each step count divided by kStepDivisor, rounded up.
std::string shorten(const std::string& line) {
  static const std::regex count(R"((--steps|--save-every|--eval-every) ([0-9]+))");
  std::string out;
  auto last = line.cbegin();
  for (std::sregex_iterator it(line.begin(), line.end(), count), done; it != done; ++it) {
    const std::smatch& m = *it;
    const int64_t n = std::stoll(m[2].str());
    out.append(last, m[0].first);
    out += m[1].str() + " " + std::to_string(n == 0 ? 0 : (n + kStepDivisor - 1) / kStepDivisor);
    last = m[0].second;
  }
  out.append(last, line.cend());
  if (kSanitized && out.find("--val-batches") == std::string::npos) {
    static const std::regex train(R"((fanout train|-- train)( |$))");
    out = std::regex_replace(out, train, "$1 --val-batches 2$2",
                             std::regex_constants::format_first_only);
  }
  return out;
}

// A training command the test could not shorten would run for minutes.
bool trains(const std::string& line) {
  return line.find("fanout train") != std::string::npos ||
         line.find("-- train") != std::string::npos || line.find("torchrun") == 0;
}

// A folder laid out as the repository's root, as far as the examples read it.
struct FreshClone {
  TempDir dir{"fanout-readme"};
  FreshClone() {
    const fs::path source = FANOUT_SOURCE_DIR;
    fs::copy_file(readme_path(), dir / "README.md");
    fs::create_directory(dir / "docs");
    for (const fs::directory_entry& e : fs::directory_iterator(source / "docs")) {
      if (e.path().extension() == ".md")
        fs::copy_file(e.path(), dir / "docs" / e.path().filename());
    }
    fs::create_directories(dir / "build/apps/fanout");
    fs::create_symlink(fs::absolute(fanout_binary()), dir / "build/apps/fanout/fanout");
  }
};

// What one line of a block did: its exit code (-1: never reached) and output.
struct LineResult {
  std::string line;
  int rc = -1;
  std::string output;
};

// Runs `lines` (shortened) in `root` as one bash script, each line's output in a
// log of its own, stopping at the first that fails. `path_prefix` goes before PATH.
std::vector<LineResult> block_run(const std::vector<std::string>& lines, const std::string& root,
                                  const std::string& path_prefix, double timeout_s) {
  const std::string logs = root + "/.readme-logs";
  fs::create_directory(logs);
  std::string script = "cd '" + root + "' || exit 1\n";
  if (!path_prefix.empty()) script += "export PATH='" + path_prefix + "':\"$PATH\"\n";
  std::vector<LineResult> results;
  for (size_t i = 0; i < lines.size(); ++i) {
    results.push_back({shorten(lines[i])});
    const std::string log = logs + "/" + std::to_string(i);
    // The braces keep the line in this shell (its export lasts), the newline ends
    // a trailing comment.
    script += "{ " + results.back().line + "\n} </dev/null >'" + log + ".out' 2>&1\n";
    script += "rc=$?; echo $rc >'" + log + ".rc'; [ $rc -eq 0 ] || exit 1\n";
  }
  file_write(logs + "/script.sh", script);
  // No launcher's variables from the test's own environment reach the examples.
  std::vector<std::string> env = {
      "RANK",         "WORLD_SIZE",           "LOCAL_RANK",        "MASTER_ADDR",
      "MASTER_PORT",  "FANOUT_LAUNCHER",      "FANOUT_JOB_SECRET", "TORCHELASTIC_RUN_ID",
      "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
  Command bash({"/bin/bash", logs + "/script.sh"}, env, logs + "/bash.log");
  const int rc = bash.wait(timeout_s);
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string log = logs + "/" + std::to_string(i);
    if (!fs::exists(log + ".rc")) {
      if (fs::exists(log + ".out")) results[i].output = file_read(log + ".out");
      break;
    }
    results[i].rc = std::stoi(file_read(log + ".rc"));
    results[i].output = file_read(log + ".out");
  }
  if (rc < 0) MESSAGE("the block did not finish within ", timeout_s, " s");
  return results;
}

// Every line ran and exited 0; a failure names the line and shows its output's end.
void check_all_ran(const std::vector<LineResult>& results) {
  for (const LineResult& r : results) {
    const std::string tail =
        r.output.size() > 3000 ? r.output.substr(r.output.size() - 3000) : r.output;
    INFO("README line (shortened): " << r.line << "\noutput:\n" << tail);
    CHECK(r.rc == 0);
    if (r.rc != 0) break;  // the lines after it were never run
  }
}

// Why torchrun cannot run here, or "".
std::string torch_missing() {
  if (shell("command -v torchrun") != 0) return "no torchrun on the PATH";
  if (shell("torchrun --help") != 0) return "torchrun does not start (torch missing?)";
  return "";
}
}  // namespace

TEST_CASE("the README's examples run in order on a fresh clone, every file made by a line before") {
  const std::vector<std::string> lines = readme_block("examples");
  for (const std::string& line : lines) {
    CAPTURE(line);
    // The test shortens runs through --steps: a run without it would take minutes.
    if (trains(line)) CHECK(line.find("--steps ") != std::string::npos);
  }
  FreshClone clone;
  const auto t0 = std::chrono::steady_clock::now();
  // Sanitizers run the block 10x slower (ASan trained at 246 tokens/s): the bound
  // against a hang stays under ctest's own timeout for such a run (tools/sanitize.sh).
  const std::vector<LineResult> results =
      block_run(lines, clone.dir.path, "", kResidentMemoryChecked && !kSanitized ? 600 : 1700);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("the README's ", lines.size(), " example lines ran in ", secs, " s");
  check_all_ran(results);
}

TEST_CASE("the README's torchrun line trains two ddp ranks on CPU devices") {
  const std::vector<std::string> lines = readme_block("torchrun");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("--steps ") != std::string::npos);
  const std::string missing = torch_missing();
  if (!missing.empty()) {
    MESSAGE("skipped: ", missing, ": the README's torchrun line needs PyTorch");
    return;
  }
  FreshClone clone;
  // As after the examples' first line: fanout on the PATH.
  const std::vector<LineResult> results =
      block_run(lines, clone.dir.path, clone.dir / "build/apps/fanout", 300);
  check_all_ran(results);
  // Both ranks trained: rank 0 wrote the checkpoint, the metrics say two processes.
  CHECK(fs::is_directory(clone.dir / "runs/torchrun/final"));
  CHECK(results[0].output.find("on 2 processes (gloo") != std::string::npos);
}
