// A run directory belongs to one `fanout train` at a time: a second run on the same
// --out (started together, or resuming while the first still trains) is refused in
// one line naming the owner's pid; a lock left by a dead run is no obstacle; the
// lock file goes when the run ends. SIGTERM stops a run as Ctrl-C does (step
// finished, checkpoint written, exit 143). Temporary directories that interrupted
// checkpoint writes left behind are removed; files that are not provably ours stay.

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/train/checkpoint.h"
#include "apps/train/run_dir.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// No process can have this pid: it is above the kernel's largest pid_max (2^22).
constexpr const char* kDeadPid = "4194999";

std::vector<std::string> run_args(const TrainFiles& f, const std::string& out,
                                  const std::string& steps) {
  return {"--config",  f.config, "--data",  f.data, "--devices",    "cpu:0", "--batch-size", "4",
          "--seq-len", "16",     "--steps", steps,  "--save-every", "1",     "--out",        out};
}
}  // namespace

TEST_CASE("train refuses a second run on a directory another run holds, naming its pid") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  BackgroundTrain first(run_args(f, out, "100000"));
  REQUIRE(poll_until([&] { return fs::exists(out + "/step-000001/trainer_state.json"); }, 60));
  CliResult second = train_cli({"--resume", "last", "--out", out, "--steps", "100001"});
  INFO("stderr: " << second.err);
  CHECK(second.rc == 1);
  CHECK(second.err_lines() == 1);
  CHECK(second.err.find("--out " + out + " is in use by another fanout train (pid ") !=
        std::string::npos);
  first.signal(SIGINT);
  CHECK(first.wait(60) == 130);
  CHECK(!fs::exists(out + "/" + train::kRunLockFile));  // released on exit
  // Now free: a resume goes through.
  const int64_t done = train::checkpoint_read(train::checkpoint_find_last(out)).state.step;
  CliResult again =
      train_cli({"--resume", "last", "--out", out, "--steps", std::to_string(done + 1)});
  INFO("stderr: " << again.err);
  CHECK(again.rc == 0);
}

TEST_CASE("two runs started together on one fresh directory: exactly one trains") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  BackgroundTrain a(run_args(f, out, "6"));
  BackgroundTrain b(run_args(f, out, "6"));
  const int ra = a.wait(120), rb = b.wait(120);
  INFO("a: " << ra << " " << a.err() << "\nb: " << rb << " " << b.err());
  CHECK(((ra == 0) != (rb == 0)));
  const std::string err = ra == 0 ? b.err() : a.err();
  CHECK((err.find("is in use by another fanout train") != std::string::npos ||
         err.find("already holds files") != std::string::npos));
  CHECK(train::checkpoint_read(out + "/final").state.step == 6);
}

TEST_CASE("a lock file left by a dead run does not block the directory") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  fs::create_directory(out);
  file_write(out + "/" + train::kRunLockFile, std::string(kDeadPid) + "\n");
  CliResult r = train_cli(run_args(f, out, "2"));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(!fs::exists(out + "/" + train::kRunLockFile));
  file_write(out + "/" + train::kRunLockFile, std::string(kDeadPid) + "\n");
  CliResult resumed = train_cli({"--resume", "last", "--out", out, "--steps", "3"});
  INFO("stderr: " << resumed.err);
  CHECK(resumed.rc == 0);
}

TEST_CASE("train on SIGTERM finishes the step, checkpoints it and exits 143") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  std::vector<std::string> args = run_args(f, out, "100000");
  args[args.size() - 3] = "0";  // --save-every 0: the checkpoint comes from the signal
  BackgroundTrain run(args);
  REQUIRE(poll_until([&] { return metrics_steps(out + "/metrics.jsonl").size() >= 2; }, 60));
  run.signal(SIGTERM);
  const int rc = run.wait(60);
  INFO("stdout: " << run.out() << "\nstderr: " << run.err());
  REQUIRE(rc == 143);
  CHECK(run.err().empty());
  const int64_t n = metrics_steps(out + "/metrics.jsonl").back()["step"].get<int64_t>();
  CHECK(run.out().find("terminated (SIGTERM) at step " + std::to_string(n)) != std::string::npos);
  CHECK(train::checkpoint_read(out + "/" + train::checkpoint_step_name(n)).state.step == n);
}

TEST_CASE("train removes checkpoint temporaries of dead writers and keeps everything else") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  REQUIRE(train_cli(run_args(f, out, "2")).rc == 0);
  // What a SIGKILL during a checkpoint write leaves: a half-written directory.
  const std::string stale = out + "/step-000007.tmp-" + kDeadPid + "-0";
  fs::create_directory(stale);
  file_write(stale + "/config.json", "{}");
  file_write(stale + "/model.safetensors.tmp", std::string(1000, 'x'));
  // Same pattern, but holding a file fanout never writes: not provably ours.
  const std::string foreign = out + "/notes.tmp-" + kDeadPid + "-1";
  fs::create_directory(foreign);
  file_write(foreign + "/mine.txt", "keep");
  // A live writer's temporary (this test's own pid) is not stale.
  const std::string live = out + "/step-000009.tmp-" + std::to_string(::getpid()) + "-0";
  fs::create_directory(live);
  CliResult r = train_cli({"--resume", "last", "--out", out, "--steps", "3"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(!fs::exists(stale));
  CHECK(r.out.find("removed step-000007.tmp-" + std::string(kDeadPid) + "-0") != std::string::npos);
  CHECK(file_read(foreign + "/mine.txt") == "keep");
  CHECK(fs::exists(live));
}

TEST_CASE("train --out as a symlink to nothing is refused in one line naming its target") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  fs::create_symlink(f.dir / "gone", out);
  CliResult r = train_cli(run_args(f, out, "1"));
  INFO("stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("--out " + out + " is a symbolic link to " + (f.dir / "gone") +
                   ", which does not exist") != std::string::npos);
  CHECK(!fs::exists(f.dir / "gone"));
}

TEST_CASE("train --trace into its own new --out folder is written there") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  std::vector<std::string> args = run_args(f, out, "1");
  args.insert(args.end(), {"--trace", out + "/trace.json"});
  CliResult r = train_cli(args);
  INFO("stderr: " << r.err);
  CHECK(r.rc == 0);
  CHECK(file_read(out + "/trace.json").find("traceEvents") != std::string::npos);
  // Another missing folder is still refused before any work, and --data never replaced.
  args = run_args(f, f.dir / "run2", "1");
  args.insert(args.end(), {"--trace", f.dir / "elsewhere/trace.json"});
  r = train_cli(args);
  CHECK(r.rc == 1);
  CHECK(r.err.find("the folder " + (f.dir / "elsewhere") + " does not exist") != std::string::npos);
  const std::string data = file_read(f.data);
  args = run_args(f, f.dir / "run3", "1");
  args.insert(args.end(), {"--trace", f.data});
  r = train_cli(args);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("--trace " + f.data + " is the same file as the input " + f.data) !=
        std::string::npos);
  CHECK(file_read(f.data) == data);
}

TEST_CASE("train --output-device outside --devices is refused in one line") {
  TrainFiles f;
  CliResult r = train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0,cpu:1",
                           "--output-device", "cpu:3", "--loss-on", "output", "--batch-size", "4",
                           "--seq-len", "16", "--steps", "1", "--out", f.dir / "run"});
  INFO("stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find("--output-device cpu:3 is not one of the devices this run trains on "
                   "(cpu:0,cpu:1): list it in --devices") != std::string::npos);
  CHECK(!fs::exists(f.dir / "run"));
}
