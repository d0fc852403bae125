// Every number `fanout train` takes is checked as text and as a quantity before
// anything runs: an empty value, a non-number, inf/nan, a negative seed, a count
// past its bound, or a size whose bytes overflow is one line and a non-zero exit
// (never a SIGFPE, a hang or a silent default). Also: flags that would be ignored
// (a model flag beside --resume, --data '') are refused, and a
// mistyped subcommand names the closest one.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

struct Bad {
  std::vector<std::string> args;
  std::string phrase;
};

void check_refused(const CliResult& r, const std::string& phrase) {
  INFO("rc " << r.rc << "\nstderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.rc != 0);
  CHECK(r.rc < 128);  // not killed by a signal (SIGFPE, SIGSEGV, ...)
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("fanout: error: ", 0) == 0);
  CHECK(r.err.find(phrase) != std::string::npos);
}
}  // namespace

TEST_CASE("train refuses every malformed or out-of-range number with one line") {
  TrainFiles f;
  const std::vector<std::string> base = {"--config",     f.config, "--data",    f.data,
                                         "--devices",    "cpu:0",  "--steps",   "1",
                                         "--batch-size", "4",      "--seq-len", "16"};
  const std::vector<Bad> cases = {
      {{"--seq-len", ""}, "--seq-len: an empty value is not a number"},
      {{"--min-lr", ""}, "--min-lr: an empty value"},
      {{"--warmup", ""}, "--warmup: an empty value"},
      {{"--beta1", ""}, "--beta1: an empty value"},
      {{"--clip", ""}, "--clip: an empty value"},
      {{"--seed", ""}, "--seed: an empty value"},
      {{"--lr", ""}, "--lr: an empty value"},
      {{"--bucket-mb", ""}, "--bucket-mb: an empty value"},
      {{"--seed", "-1"}, "--seed: '-1' is negative"},
      {{"--seed", "18446744073709551616"}, "--seed: '18446744073709551616' is out of range"},
      {{"--eps", "inf"}, "--eps: 'inf' is not a finite number"},
      {{"--lr", "nan"}, "--lr: 'nan' is not a finite number"},
      {{"--clip", "1e400"}, "--clip: '1e400' is out of range"},
      {{"--bucket-mb", "inf"}, "--bucket-mb: 'inf' is not a finite number"},
      {{"--bucket-mb", "1e300"}, "--bucket-mb: '1e300' is out of range"},
      {{"--bucket-mb", "0"}, "--bucket-mb must be a finite number in (0,"},
      {{"--batch-size", "12abc"}, "--batch-size: '12abc' is not a whole number"},
      {{"--batch-size", "288230376151711744"},
       "--batch-size: '288230376151711744' is out of range"},
      {{"--batch-size", "4611686018427387904", "--grad-accum", "4"}, "is out of range"},
      {{"--steps", "9223372036854775808"}, "--steps: '9223372036854775808' is out of range"},
      {{"--steps", "1000000001"}, "--steps: '1000000001' is out of range"},
      {{"--grad-accum", "-3"}, "--grad-accum: '-3' is out of range"},
      {{"--beta2", "1"}, "--beta2 must be in [0, 1)"},
      {{"--timeout", "0"}, "--timeout must be a finite number in (0,"},
      {{"--precision", "fp16"}, "--precision must be fp32 or bf16"},
      {{"--precision", ""}, "--precision: an empty value is not allowed"},
      {{"--grad-comm", "bf8"}, "--grad-comm must be fp32 or bf16"},
      {{"--data", ""}, "--data: an empty value is not allowed"},
      {{"--out", ""}, "--out: an empty value is not allowed"},
      {{"--devices", ""}, "--devices: an empty value is not allowed"},
  };
  int n = 0;
  for (const Bad& c : cases) {
    std::vector<std::string> args = base;
    const std::string out = f.dir / ("out" + std::to_string(n++));
    args.insert(args.end(), {"--out", out});
    args.insert(args.end(), c.args.begin(), c.args.end());
    CAPTURE(c.phrase);
    check_refused(train_cli(args), c.phrase);
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("train refuses sizes whose tokens or bytes cannot fit before allocating") {
  TrainFiles f;
  const std::string out = f.dir / "out";
  // Within every flag's bound, but the activations of one micro-batch overflow or
  // exceed the machine's memory: refused by size, not by bad_alloc or SIGFPE.
  check_refused(train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0",
                           "--batch-size", "1000000000", "--seq-len", "64", "--out", out}),
                "of memory");
  check_refused(train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0",
                           "--batch-size", "1000000000", "--grad-accum", "1000", "--seq-len", "64",
                           "--steps", "1000000000", "--out", out}),
                "does not fit in 64 bits");
  CHECK(!fs::exists(out));
}

TEST_CASE("train refuses a device list past the engine's bound in one line") {
  TrainFiles f;
  std::string many = "cpu:0";
  for (int i = 1; i < 4000; ++i) many += ",cpu:" + std::to_string(i % 1000);
  check_refused(train_cli({"--config", f.config, "--data", f.data, "--devices", many, "--out",
                           f.dir / "out"}),
                "more than 64 entries");
}

TEST_CASE("train refuses a model flag beside --resume instead of ignoring it") {
  TrainFiles f;
  const std::string run = f.dir / "run";
  CliResult r = train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0",
                           "--batch-size", "4", "--seq-len", "16", "--steps", "2", "--out", run});
  REQUIRE(r.rc == 0);
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--preset", "small"}, {"--config", f.config}, {"--init", run + "/final"}}) {
    CAPTURE(flag);
    check_refused(train_cli({"--resume", "last", "--out", run, "--steps", "3", flag, value}),
                  "--resume continues the checkpoint's model: drop " + flag);
  }
  CHECK(dir_list(run) == std::vector<std::string>{"curves.svg", "final", "metrics.jsonl"});
}

TEST_CASE("train under a launcher's WORLD_SIZE refuses a single-process strategy") {
  TrainFiles f;
  const std::string out = f.dir / "out";
  CliResult r = run_fanout({"train", "--config", f.config, "--data", f.data, "--devices", "cpu:0",
                            "--strategy", "dp", "--out", out},
                           "WORLD_SIZE=2 RANK=1");
  check_refused(r, "WORLD_SIZE=2 says this is one of several processes");
  CHECK(!fs::exists(out));
}

TEST_CASE("a mistyped subcommand names the closest command") {
  CliResult r = run_fanout({"trian"});
  check_refused(r, "unknown command 'trian'; did you mean 'train'?");
  CHECK(r.rc == 2);
  check_refused(run_fanout({"qwertyuiop"}), "unknown command 'qwertyuiop' (see fanout --help)");
}

TEST_CASE("train names the path and the reason when --out cannot be a run directory") {
  TrainFiles f;
  const std::vector<std::string> base = {"--config",  f.config, "--data",  f.data,
                                         "--devices", "cpu:0",  "--steps", "1"};
  auto with_out = [&](const std::string& out) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--out", out});
    return train_cli(args);
  };
  const std::string file = f.dir / "plain";
  file_write(file, "x");
  check_refused(with_out(file), "--out " + file + ": exists and is not a directory");
  check_refused(with_out(file + "/run"), file + " is not a directory");
  const std::string loop = f.dir / "loop";
  fs::create_symlink(loop, loop);
  check_refused(with_out(loop + "/run"), "Too many levels of symbolic links");
  if (::geteuid() != 0) {  // root writes anywhere
    const std::string ro = f.dir / "ro";
    fs::create_directory(ro);
    ::chmod(ro.c_str(), 0555);
    check_refused(with_out(ro + "/run"), "cannot create it in " + ro);
  }
}

TEST_CASE("train refuses an unknown --attention and cudnn where it cannot run, before running") {
  TrainFiles f;
  const std::string out = f.dir / "out";
  auto args = [&](std::vector<std::string> more, const std::string& dir = "") {
    std::vector<std::string> a = {
        "--config", f.config,  "--data", f.data,  "--devices",
        "cpu:0",    "--steps", "1",      "--out", dir.empty() ? out : dir};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  check_refused(train_cli(args({"--attention", "flash"})),
                "--attention: unknown kernel 'flash' (choose auto, exact or cudnn)");
  check_refused(train_cli(args({"--attention", "cudnn", "--precision", "bf16"})),
                "--attention cudnn runs on CUDA devices");
  CHECK(!fs::exists(out));
  // auto and exact are kernel choices that CPU devices simply do not need.
  for (const char* choice : {"auto", "exact"}) {
    CAPTURE(choice);
    CliResult r = train_cli(
        args({"--attention", choice, "--batch-size", "2", "--seq-len", "8"}, f.dir / choice));
    CHECK(r.rc == 0);
    CHECK(r.out.find("attention:") == std::string::npos);  // named only on CUDA devices
  }
}
