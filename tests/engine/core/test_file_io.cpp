// Files a user names: inputs only when regular (a FIFO is refused, not waited
// on); results only to regular files or new paths, written atomically with every
// write checked, so a FIFO, device, symlink or directory is never replaced and a
// full disk is an error that leaves the old file and no temporary behind.

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/engine/core/file_node_util.h"

using namespace fanout;
using fanout::test::has;

TEST_CASE(
    "file_write_atomic refuses a FIFO, device, symlink or directory and leaves it as it was") {
  test::TempDir dir("fanout-file-io");
  for (const test::FileNode& node : test::make_file_nodes(dir.path)) {
    CAPTURE(node.kind);
    const std::string before = test::file_node_identity(node.path);
    const std::string err =
        test::error_of([&] { file_write_atomic(node.path, "result\n", "--result"); });
    CHECK(has(err, "--result"));
    CHECK(has(err, node.path));
    CHECK(has(err, "is " + node.kind));
    CHECK(test::file_node_identity(node.path) == before);
    // The same refusal is available before any work is done.
    CHECK(test::error_of([&] { file_check_output(node.path, "--result"); }) == err);
  }
  CHECK(test::file_read(dir / "target") == "keep me\n");
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("file_write_atomic writes a new path and replaces a regular file") {
  test::TempDir dir("fanout-file-io");
  file_write_atomic(dir / "new.json", "one\n", "--json");
  CHECK(test::file_read(dir / "new.json") == "one\n");
  file_write_atomic(dir / "new.json", "two\n", "--json");
  CHECK(test::file_read(dir / "new.json") == "two\n");
  CHECK(has(test::error_of([&] { file_check_output(dir / "no/such/x.json", "--json"); }),
            "does not exist"));
  CHECK(has(test::error_of([&] { file_check_output("", "--json"); }), "empty"));
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("file_write_atomic on a full disk throws naming the path and keeps the old file") {
  test::TempDir dir("fanout-file-io");
  const std::string path = dir / "result.json";
  file_write_atomic(path, "old\n", "--json");
  std::string err;
  {
    test::FileSizeLimit limit(512);  // writes past 512 bytes fail with EFBIG
    err = test::error_of([&] { file_write_atomic(path, std::string(4096, 'x'), "--json"); });
  }
  CHECK(has(err, path));
  CHECK(has(err, std::strerror(EFBIG)));
  CHECK(test::file_read(path) == "old\n");
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("file_read_regular refuses a FIFO at once instead of waiting for a writer") {
  test::TempDir dir("fanout-file-io");
  for (const test::FileNode& node : test::make_file_nodes(dir.path)) {
    if (node.kind == "a symbolic link") continue;  // inputs follow links: it reads the target
    CAPTURE(node.kind);
    CHECK(has(test::error_of([&] { file_read_regular(node.path); }), "is " + node.kind));
  }
  CHECK(file_read_regular(dir / "link") == "keep me\n");
}
