// Note [Replacing an existing output] in file_io.h: an output is never one of the
// command's inputs, whatever name reaches it (the path itself, a symlink, a hard
// link, a path through a linked folder), and an existing file is replaced only when
// it is empty or of the kind the command writes. The old file_io had neither check
// (file_write_atomic replaced any regular file), and no OutputRules to give them.

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"

using namespace fanout;
using fanout::test::has;

namespace {
namespace fs = std::filesystem;

OutputRules svg_rules(std::vector<std::string> inputs) {
  return {std::move(inputs), "an SVG written by fanout", [](const std::string& path) {
            return file_starts_with(path, std::string(kWrittenByFanout) + "<svg");
          }};
}
}  // namespace

TEST_CASE(
    "file_check_output refuses an input by any name: itself, symlink, hard link, folder link") {
  test::TempDir dir("fanout-file-rules");
  fs::create_directory(dir / "run");
  test::file_write(dir / "run/metrics.jsonl", "{\"step\": 1}\n");
  fs::create_symlink(dir / "run/metrics.jsonl", dir / "soft");
  REQUIRE(::link((dir / "run/metrics.jsonl").c_str(), (dir / "hard").c_str()) == 0);
  fs::create_directory_symlink(dir / "run", dir / "run-link");
  const OutputRules rules{{dir / "run/metrics.jsonl"}, "", nullptr};
  for (const std::string& out :
       {dir / "run/metrics.jsonl", dir / "soft", dir / "hard", dir / "run-link/metrics.jsonl"}) {
    CAPTURE(out);
    const std::string err = test::error_of([&] { file_check_output(out, "--out", rules); });
    CHECK(has(err, "--out " + out + " is the same file as the input " + dir / "run/metrics.jsonl"));
    CHECK(test::error_of([&] { file_write_atomic(out, "<svg/>", "--out", rules); }) == err);
  }
  CHECK(test::file_read(dir / "run/metrics.jsonl") == "{\"step\": 1}\n");
  CHECK(test::temp_leftovers(dir.path).empty());
  CHECK(test::temp_leftovers(dir / "run").empty());
  // Another file, a new path and a missing input are no obstacle.
  test::file_write(dir / "other.svg", "");
  const OutputRules with_missing{{dir / "run/metrics.jsonl", dir / "none", ""}, "", nullptr};
  CHECK(test::error_of([&] { file_check_output(dir / "other.svg", "--out", with_missing); }) == "");
  CHECK(test::error_of([&] { file_check_output(dir / "new.svg", "--out", with_missing); }) == "");
}

TEST_CASE("an existing file is replaced only when it is empty or of the kind written") {
  test::TempDir dir("fanout-file-rules");
  const OutputRules rules = svg_rules({});
  test::file_write(dir / "notes.txt", "my notes\n");
  test::file_write(dir / "drawing.svg", "<svg>mine</svg>\n");  // an SVG, not fanout's
  for (const std::string& name : {"notes.txt", "drawing.svg"}) {
    const std::string before = test::file_read(dir / name);
    const std::string err =
        test::error_of([&] { file_write_atomic(dir / name, "x", "--out", rules); });
    CHECK(has(err, "--out " + dir / name + ": exists and is not an SVG written by fanout"));
    CHECK(has(err, "remove it or choose another path"));
    CHECK(test::file_read(dir / name) == before);
  }
  const std::string ours = std::string(kWrittenByFanout) + "<svg>new</svg>\n";
  test::file_write(dir / "empty.svg", "");
  file_write_atomic(dir / "empty.svg", ours, "--out", rules);
  CHECK(test::file_read(dir / "empty.svg") == ours);
  file_write_atomic(dir / "empty.svg", ours + "again", "--out", rules);  // fanout's own
  CHECK(test::file_read(dir / "empty.svg") == ours + "again");
  // Without a kind, any regular file may be replaced (traces, bench results).
  file_write_atomic(dir / "notes.txt", "replaced", "--trace");
  CHECK(test::file_read(dir / "notes.txt") == "replaced");
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("file_starts_with reads only the head and is false for what cannot be read") {
  test::TempDir dir("fanout-file-rules");
  test::file_write(dir / "a", "abcdef");
  CHECK(file_starts_with(dir / "a", "abc"));
  CHECK(file_starts_with(dir / "a", "abcdef"));
  CHECK(!file_starts_with(dir / "a", "abcdefg"));
  CHECK(!file_starts_with(dir / "a", "b"));
  CHECK(!file_starts_with(dir / "missing", "a"));
  CHECK(!file_starts_with(dir.path, "a"));  // a directory
}
