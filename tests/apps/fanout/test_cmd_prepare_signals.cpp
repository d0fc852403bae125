// SIGTERM or Ctrl-C (SIGINT) while `fanout prepare` writes its token files (Note
// [Signals during a write] in engine/core/file_io.h): the files already being written
// are finished, then the process dies of the signal (143 / 130 as a shell reports
// it); no OUT/*.tmp-PID-N stays behind, and each token file is absent or whole.
// Before, the signal killed prepare mid-write and left the temporary (megabytes).

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "apps/data/bpe_trainer.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/apps/fanout/train_util.h"
#include "tests/paths_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// About 10 MB of seeded words in paragraphs: some 8 MB of uint16 tokens to write.
std::string big_text() {
  static const char* const kWords[] = {"the",  "cat",  "sat",  "on",    "a",    "mat",
                                       "dog",  "ran",  "far",  "away",  "and",  "then",
                                       "came", "back", "home", "quick", "zebra"};
  std::mt19937 rng(7);
  std::string text;
  while (text.size() < (size_t{10} << 20)) {
    for (int w = 0; w < 60; ++w) text += std::string(kWords[rng() % 17]) + " ";
    text += "\n\n";
  }
  return text;
}

// `fanout prepare ARGS` in the background with SIGINT and SIGTERM at their defaults.
pid_t prepare_spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> prepare = {"prepare"};
  prepare.insert(prepare.end(), args.begin(), args.end());
  return fanout_spawn(prepare, "/dev/null", log);
}

// "" when `path` is absent or a whole llm.c token file (its size as its header says).
std::string token_file_problem(const std::string& path) {
  if (!fs::exists(path)) return "";
  const std::string bytes = file_read(path);
  if (bytes.size() < 1024) return path + ": shorter than a header";
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  const size_t width = header[0] == 20240520 ? 2 : 4;
  const size_t want = 1024 + static_cast<size_t>(header[2]) * width;
  return bytes.size() == want
             ? ""
             : path + ": " + std::to_string(bytes.size()) + " bytes, not " + std::to_string(want);
}

bool has_temp(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !temp_leftovers(dir).empty();
}
}  // namespace

TEST_CASE("a signal while prepare writes leaves whole token files and no temporary, then acts") {
  TempDir tmp("fanout-prepare-signal");
  const std::string text = tmp / "big.txt", tok = tmp / "tok.json";
  file_write(text, big_text());
  fanout::data::BpeTrainOptions options;
  options.vocab_size = 300;
  auto tokenizer = fanout::data::bpe_tokenizer(
      fanout::data::bpe_train_texts({big_text().substr(0, 200000)}, options), tok);
  fanout::file_write_atomic(tok, tokenizer->to_json(), "test");

  int during = 0;  // signals sent while a temporary was on disk that ended prepare
  int run = 0;
  for (const int sig : {SIGTERM, SIGINT}) {
    for (const int delay_us : {0, 0, 1000, 5000}) {
      CAPTURE(sig);
      CAPTURE(delay_us);
      const std::string out = tmp / ("out" + std::to_string(run++));
      const pid_t pid =
          prepare_spawn({"--tokenizer", tok, "--data", text, "--out", out}, tmp / "err");
      int status = 0;
      bool exited = false;
      const bool writing = poll_until(
          [&] {
            exited = exited || ::waitpid(pid, &status, WNOHANG) == pid;
            return exited || has_temp(out);
          },
          120);
      REQUIRE(writing);
      if (!exited) {
        ::usleep(static_cast<useconds_t>(delay_us));
        ::kill(pid, sig);
        REQUIRE(::waitpid(pid, &status, 0) == pid);
      }
      CAPTURE(file_read(tmp / "err"));
      const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      CHECK((rc == 128 + sig || rc == 0));
      CHECK(!has_temp(out));
      CHECK(token_file_problem(out + "/train.bin") == "");
      CHECK(token_file_problem(out + "/val.bin") == "");
      if (!exited && rc == 128 + sig) {
        during += 1;
        // Held until both token files were in place.
        CHECK(fs::exists(out + "/train.bin"));
        CHECK(fs::exists(out + "/val.bin"));
      }
    }
  }
  CHECK(during > 0);
}
