// `fanout report` through the binary: the page of a real training run (with its
// trace and a bench file) is written, its errors are one line, and headless
// Chromium renders it: the screenshot is a large picture of many colours and the
// rendered DOM holds the charts' SVG. Chromium runs under a timeout in a process
// group of its own that the test kills; no Chromium process is left behind.

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/apps/fanout/command_util.h"
#include "tests/apps/fanout/train_util.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Decodes an 8-bit RGB/RGBA PNG with zlib (no PIL) and prints
// "WIDTH HEIGHT COLOURS NON_WHITE_FRACTION".
const char* const kPngStats = R"(import sys, zlib, struct
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat = 8, b''
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), 'unsupported PNG %d/%d' % (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, at = bytearray(stride), [], 0
for y in range(h):
    f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
    at += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
colours, non_white, seen = set(), 0, 0
for y in range(0, h, 3):
    row = rows[y]
    for x in range(0, w, 3):
        px = bytes(row[x * bpp:x * bpp + 3])
        colours.add(px)
        non_white += px != b'\xff\xff\xff'
        seen += 1
print(w, h, len(colours), '%.4f' % (non_white / seen))
)";

// Processes whose command line mentions `marker` (our Chromium's profile folder).
int processes_mentioning(const std::string& marker) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read(e.path().string() + "/cmdline");
    if (cmd.find(marker) != std::string::npos && std::to_string(::getpid()) != pid) ++n;
  }
  return n;
}

// A short real run with a trace, as a user makes one.
void train_run(const TrainFiles& f, const std::string& out) {
  fs::create_directories(out);
  CliResult r = train_cli({"--config",     f.config,
                           "--data",       f.data,
                           "--val-data",   f.data,
                           "--devices",    "cpu:0,cpu:1",
                           "--batch-size", "4",
                           "--seq-len",    "16",
                           "--steps",      "8",
                           "--eval-every", "4",
                           "--save-every", "4",
                           "--out",        out,
                           "--trace",      out + "/trace.json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
}

const char* const kBench = R"({"devices":"cpu:0,cpu:1","batch_size":8,"seq_len":64,"results":[
  {"mode":"dp","devices":"cpu:0,cpu:1","precision":"fp32","tokens_per_s":1000,"speedup":1.0,
   "step_s":0.5,"phases_s":{"forward":0.2,"backward":0.3},"peak_bytes":{"cpu:0":1048576}}]})";
}  // namespace

TEST_CASE("report of a trained run renders in headless Chromium") {
  TrainFiles f;
  TempDir tmp("fanout-report-cli");
  train_run(f, tmp / "run");
  std::ofstream(tmp / "bench.json") << kBench;
  CliResult r = run_fanout(
      {"report", tmp / "run", "--bench", tmp / "bench.json", "--out", tmp / "report.html"});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "report of 1 run written to"));
  const std::string page = read(tmp / "report.html");
  CHECK(xml_problem(page) == "");
  CHECK(has(page, "<h3>Trace: trace.json</h3>"));
  CHECK(has(page, "<h3>Bench: bench.json</h3>"));
  CHECK(has(page, "from " + tmp / "run/final/trainer_state.json"));

  const char* chromium = "/usr/bin/chromium";
  if (::access(chromium, X_OK) != 0) {
    // CI installs it (third_party/install_deps.sh): there a missing browser is a failure.
    if (std::getenv("CI")) FAIL("chromium is not installed (third_party/install_deps.sh)");
    MESSAGE("skipped the rendering: " << chromium << " is not installed");
    return;
  }
  const std::string profile = tmp / "chromium-profile";
  auto browse = [&](const std::vector<std::string>& what, const std::string& log) {
    std::vector<std::string> args = {"/usr/bin/timeout",
                                     "-k",
                                     "5",
                                     "90",
                                     chromium,
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--hide-scrollbars",
                                     "--no-first-run",
                                     "--user-data-dir=" + profile};
    args.insert(args.end(), what.begin(), what.end());
    args.push_back("file://" + tmp / "report.html");
    Command c(args, {"HOME=" + tmp.path}, log);
    return c.wait(120);  // the destructor kills whatever of its group is left
  };
  const std::string png = tmp / "report.png";
  CHECK(browse({"--screenshot=" + png, "--window-size=1200,1600"}, tmp / "shot.log") == 0);
  REQUIRE_MESSAGE(fs::exists(png), read(tmp / "shot.log"));
  CHECK(fs::file_size(png) > 20000);
  const std::string script = tmp / "png_stats.py";
  std::ofstream(script) << kPngStats;
  Command stats({"/usr/bin/python3", script, png}, {}, tmp / "stats.log");
  REQUIRE(stats.wait(60) == 0);
  std::istringstream in(stats.output());
  int w = 0, h = 0, colours = 0;
  double non_white = 0;
  in >> w >> h >> colours >> non_white;
  INFO("png stats: " << stats.output());
  CHECK(w == 1200);
  CHECK(h == 1600);
  CHECK(colours >= 8);      // text, axes and several series colours
  CHECK(non_white > 0.02);  // the charts drew, not a blank page
  CHECK(non_white < 0.9);   // nor a page of one colour
  // The rendered DOM holds the curves' SVG: a path per series.
  CHECK(browse({"--dump-dom"}, tmp / "dom.log") == 0);
  const std::string dom = read(tmp / "dom.log");
  CHECK(count_of(dom, "<svg") >= 3);
  CHECK(count_of(dom, "class=\"series\"") + count_of(dom, "class='series'") >= 6);
  CHECK(processes_mentioning(profile) == 0);
}

TEST_CASE("report errors are one line and write nothing") {
  TempDir tmp("fanout-report-cli");
  fs::create_directories(tmp / "empty");
  CliResult r = run_fanout({"report", tmp / "empty", "--out", tmp / "r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "no metrics.jsonl"));
  r = run_fanout({"report", tmp / "empty", "--out", tmp / "missing/r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  fs::create_directories(tmp / "run");
  std::ofstream(tmp / "run/metrics.jsonl") << "{\"step\":1,\"loss\":2}\n";
  r = run_fanout({"report", tmp / "run", "--bench", tmp / "none.json", "--out", tmp / "r.html"});
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "none.json"));
  CHECK_FALSE(fs::exists(tmp / "r.html"));
}
