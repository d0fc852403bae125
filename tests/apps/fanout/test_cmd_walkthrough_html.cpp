// `fanout walkthrough --html` through the binary: the tiny preset on two CPU
// devices writes one self-contained page under 2 MB with a section per mode,
// the hostile path it names escaped; a second run replaces the page it wrote;
// wrong inputs are one line each, before anything runs or is written.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/file_io.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::test;

namespace fs = std::filesystem;

TEST_CASE("walkthrough --html writes one page for the tiny preset on two CPU devices") {
  TempDir tmp("fanout-walkthrough-page");
  fs::create_directories(tmp / "<b>runs & 'more'");
  const std::string trace = tmp / "<b>runs & 'more'/<script>x&y.json";
  const std::string html = tmp / "walk.html";
  const std::vector<std::string> args = {"walkthrough", "--preset",      "tiny", "--devices",
                                         "cpu:0,cpu:1", "--trace",       trace,  "--html",
                                         html,          "--timed-steps", "1"};
  CliResult r = run_fanout(args);
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "page: " + html));
  const std::string page = read_text(html);
  CHECK(page.rfind(std::string(fanout::kWrittenByFanout) + "<!DOCTYPE html>", 0) == 0);
  CHECK(page.size() < 2u << 20);
  CHECK(xml_problem(page) == "");
  // Self-contained: no script, and nothing fetched (the SVG namespace is a name).
  CHECK(count_of(page, "<script") == 0);
  CHECK(count_of(page, "src=") == 0);
  CHECK(count_of(page, "http") == count_of(page, "xmlns=\"http://www.w3.org/2000/svg\""));
  // Every mode of the run: six in one process, ddp, three schedules, tensor.
  CHECK(count_of(page, "<section class=\"mode\"") == 11);
  CHECK(count_of(page, "<g class=\"lane\"") >= 22);
  CHECK(has(page, "Llama, 4 layers"));
  CHECK(has(page, "&lt;b&gt;runs &amp; &#39;more&#39;/&lt;script&gt;x&amp;y.json"));
  CHECK_FALSE(has(page, "<b>runs"));
  // The command that made it, quoted as a shell reads it back.
  CHECK(has(page, "--trace &#39;" + tmp.path + "/&lt;b&gt;runs &amp; &#39;\\&#39;&#39;more"));
  CHECK(fs::exists(trace));
  // Its own page is replaced by the next run.
  r = run_fanout(args);
  CHECK(r.rc == 0);
}

TEST_CASE("walkthrough --html refuses bad outputs in one line, before the run") {
  TempDir tmp("fanout-walkthrough-page");
  std::ofstream(tmp / "notes.html") << "mine\n";
  auto refused = [&](std::vector<std::string> extra, const std::string& says) {
    std::vector<std::string> args = {"walkthrough", "--trace", tmp / "t.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_fanout(args);
    CAPTURE(says);
    INFO("stderr: " << r.err);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, says));
    CHECK(r.out == "");
    CHECK_FALSE(fs::exists(tmp / "t.json"));
  };
  refused({"--html", tmp / "notes.html"}, "notes.html");
  CHECK(read_text(tmp / "notes.html") == "mine\n");
  refused({"--html", tmp / "missing/walk.html"}, "missing");
  refused({"--html", tmp.path}, tmp.path);
  refused({"--html", tmp / "t.json"}, "--html and --trace name the same file");
  refused({"--html", ""}, "--html");
  refused({"--html", tmp / "w.html", "--preset", "huge"}, "--preset huge: not a preset");
  CHECK_FALSE(fs::exists(tmp / "w.html"));
}
