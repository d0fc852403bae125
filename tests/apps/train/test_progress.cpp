// metrics.jsonl: a resumed run keeps the lines up to its step; the log is only
// ever a regular file (a FIFO is refused at once, a symlink is not followed), and
// a write that fails (a full disk) throws naming the file instead of losing lines.
// The terminal line fits the width it is given (progress_line_fit).

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "apps/train/progress.h"
#include "engine/core/check.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/engine/core/file_node_util.h"

using namespace fanout;
using fanout::test::has;

TEST_CASE("the metrics log keeps the lines up to the resumed step and appends after them") {
  test::TempDir dir("fanout-metrics");
  const std::string path = dir / "metrics.jsonl";
  std::ofstream(path) << "{\"step\":1}\n{\"step\":2}\nnot json\n{\"step\":3}\n";
  {
    train::MetricsLog log(path, 2);
    log.write({{"step", 3}, {"loss", 1.5}});
  }
  CHECK(test::file_read(path) == "{\"step\":1}\n{\"step\":2}\n{\"loss\":1.5,\"step\":3}\n");
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("the metrics log refuses a FIFO, device, symlink or directory and leaves it") {
  test::TempDir dir("fanout-metrics");
  for (const test::FileNode& node : test::make_file_nodes(dir.path)) {
    CAPTURE(node.kind);
    const std::string before = test::file_node_identity(node.path);
    const std::string err = test::error_of([&] { train::MetricsLog log(node.path, 0); });
    CHECK(has(err, node.path));
    CHECK(has(err, "is " + node.kind));
    CHECK(test::file_node_identity(node.path) == before);
  }
  CHECK(test::file_read(dir / "target") == "keep me\n");
}

TEST_CASE("a metrics line that cannot be written throws naming the file and the reason") {
  test::TempDir dir("fanout-metrics");
  const std::string path = dir / "metrics.jsonl";
  train::MetricsLog log(path, 0);
  const nlohmann::json line = {{"step", 1}, {"note", std::string(200, 'x')}};
  std::string err;
  {
    test::FileSizeLimit limit(512);  // as a full disk: the third line does not fit
    err = test::error_of([&] {
      for (int i = 0; i < 3; ++i) log.write(line);
    });
  }
  CHECK(has(err, path));
  CHECK(has(err, std::strerror(EFBIG)));
}

// --- the terminal line ---------------------------------------------------------------

TEST_CASE("the progress line fits the terminal width, dropping fields instead of wrapping") {
  train::StepReport r{123, 2.345678, 3e-3, 0.5, 12345.0, "cpu:0 58.2 MiB cpu:1 48.0 MiB"};
  for (int width : {40, 80, 120}) {
    CAPTURE(width);
    const std::string line = train::progress_line_fit(r, 300, 754.0, width);
    CHECK(line.size() <= static_cast<size_t>(width));
    CHECK(line.find('\n') == std::string::npos);
    CHECK(has(line, "step 123/300"));
    CHECK(has(line, "loss 2.3457"));
  }
  // 120 columns hold everything; 80 drop the memory first; 40 keep step and loss.
  const std::string wide = train::progress_line_fit(r, 300, 754.0, 120);
  CHECK(has(wide, "cpu:1 48.0 MiB"));
  CHECK(has(wide, "ETA 12:34"));
  CHECK(has(wide, "["));
  const std::string normal = train::progress_line_fit(r, 300, 754.0, 80);
  CHECK(!has(normal, "cpu:0"));
  CHECK(has(normal, "ETA 12:34"));
  const std::string narrow = train::progress_line_fit(r, 300, 754.0, 40);
  CHECK(!has(narrow, "lr "));
  // Below "step N/M | loss L" the line is cut, never longer than the width.
  CHECK(train::progress_line_fit(r, 300, 754.0, 10).size() == 10);
  CHECK(train::progress_line_fit(r, 300, 754.0, 0).empty());
}

TEST_CASE("the progress bar fills in proportion to the step") {
  train::StepReport r{150, 1.0, 1e-3, 0.1, 100.0, ""};
  const std::string line = train::progress_line_fit(r, 300, 1.0, 200);
  REQUIRE(line.rfind("[", 0) == 0);
  const std::string bar = line.substr(1, line.find(']') - 1);
  CHECK(bar.size() == 24);
  CHECK(std::count(bar.begin(), bar.end(), '#') == 12);
}
