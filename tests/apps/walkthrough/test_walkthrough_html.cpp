// The walkthrough's page, rendered by headless Chromium from a real run on two
// CPU devices: in the DOM the browser built, every mode's arrows carry the
// bytes the engine counted over the drawn step (DataParallel::comm_bytes(),
// Pipeline::bytes_moved(), ProcessGroup::bytes_sent()) both as data and as
// their visible label, and those counters equal what each mode must move
// (P*4 of weights, gradients, shards); each device's memory kinds are the
// allocators' peaks; the timeline has a lane for every stream the trace
// recorded in the step and one for every device; no SVG text is cut or
// overlaps another. Without a browser: hostile strings are escaped, and
// non-finite figures never reach a coordinate.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "apps/presentation/trace_timeline.h"
#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_html.h"
#include "apps/walkthrough/walkthrough_page.h"
#include "engine/parallel/data_parallel.h"
#include "tests/apps/fanout/chromium_util.h"
#include "tests/apps/presentation/svg_check_util.h"

using namespace fanout;
using namespace fanout::walkthrough;
using test::count_of;
using test::read_text;
using test::xml_problem;

namespace {

namespace fs = std::filesystem;

// What the DOM shows of one section.
struct Drawn {
  std::map<std::string, int64_t> bytes;      // move kind -> data-bytes
  std::map<std::string, std::string> label;  // move kind -> its visible byte label
  std::map<std::string, int64_t> holds;      // "device kind" -> data-bytes
  std::set<std::string> lanes;
};

// Each <section class="mode" id=...> of `dom`, by id.
std::map<std::string, Drawn> drawn_sections(const std::string& dom) {
  std::map<std::string, Drawn> out;
  const std::regex section("<section class=\"mode\" id=\"([^\"]*)\">");
  const std::regex move(
      "<g class=\"move\" data-kind=\"([^\"]*)\" data-bytes=\"([0-9]+)\">[^]*?<tspan "
      "class=\"bytes\">([^<]*)</tspan>");
  const std::regex hold(
      "<g class=\"hold\" data-device=\"([^\"]*)\" data-kind=\"([^\"]*)\" data-bytes=\"([0-9]+)\">");
  const std::regex lane("<g class=\"lane\" data-lane=\"([^\"]*)\">");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), section);
       it != std::sregex_iterator(); ++it) {
    const size_t begin = static_cast<size_t>(it->position(0));
    const size_t end = dom.find("</section>", begin);
    const std::string body = dom.substr(begin, end - begin);
    Drawn& d = out[(*it)[1]];
    for (auto m = std::sregex_iterator(body.begin(), body.end(), move); m != std::sregex_iterator();
         ++m) {
      d.bytes[(*m)[1]] = std::stoll((*m)[2]);
      d.label[(*m)[1]] = (*m)[3];
    }
    for (auto m = std::sregex_iterator(body.begin(), body.end(), hold); m != std::sregex_iterator();
         ++m)
      d.holds[std::string((*m)[1]) + " " + std::string((*m)[2])] = std::stoll((*m)[3]);
    for (auto m = std::sregex_iterator(body.begin(), body.end(), lane); m != std::sregex_iterator();
         ++m)
      d.lanes.insert((*m)[1]);
  }
  return out;
}

const WalkthroughMode& mode(const WalkthroughResult& r, const std::string& name) {
  for (const WalkthroughMode& m : r.modes)
    if (m.name == name) return m;
  FAIL("no mode " << name);
  return r.modes.at(0);
}

const char* const kKinds[] = {"weights", "gradients", "optimizer", "activations",
                              "comm",    "data",      "other"};
const MemTag kTags[] = {MemTag::params, MemTag::grads, MemTag::optimizer, MemTag::activations,
                        MemTag::comm,   MemTag::data,  MemTag::other};

}  // namespace

TEST_CASE("the walkthrough page shows the engine's counters, in Chromium's DOM") {
  WalkthroughOptions o;
  o.devices = devices_parse("cpu:0,cpu:1");
  o.timed_steps = 1;
  std::ostringstream text;
  const WalkthroughResult r = walkthrough_run(o, text);
  const std::vector<PageSection> sections = walkthrough_sections(r, o);
  const std::string page =
      walkthrough_html(sections, walkthrough_page_info(o, r.parameters, "fanout walkthrough"));
  CHECK(xml_problem(page) == "");
  CHECK(count_of(page, "<script") == 0);
  CHECK(count_of(page, "http://") == count_of(page, "xmlns=\"http://www.w3.org/2000/svg\""));

  // What every mode must move over its drawn step, from the model's sizes alone.
  const int64_t P = r.parameters, B = o.batch_size, T = o.seq_len;
  const int64_t V = o.config.vocab_size, H = o.config.hidden_size, ids = B * T * 4;
  std::map<std::string, std::map<std::string, int64_t>> want;
  for (const char* name : {"dp-output", "dp", "dp-overlap"}) {
    const WalkthroughMode& m = mode(r, name);
    CHECK(m.last_weights_sent == P * 4);  // the primary's weights to the other device
    CHECK(m.last_sums_sent == P * 4);     // the other device's gradients to the primary
    want[name] = {{"scatter", 2 * ids}, {"broadcast", P * 4}, {"reduce", P * 4}};
  }
  want["dp-output"]["gather"] = mode(r, "dp-output").rows.at(1) * T * V * 4;
  for (const char* name : {"zero1", "zero2"}) {
    const WalkthroughMode& m = mode(r, name);
    CHECK(m.last_weights_sent == 0);  // nothing broadcast after the first step
    want[name] = {{"scatter", 2 * ids},
                  {"reduce-scatter", m.last_sums_sent},
                  {"all-gather", m.last_update_sent}};
    // Each device receives the other's shard: all of it, once.
    CHECK(m.last_sums_sent == P * 4);
    CHECK(m.last_update_sent == P * 4);
  }
  const WalkthroughMode& z3 = mode(r, "zero3");
  CHECK(z3.last_weights_sent == z3.gather_forward + z3.gather_backward);
  CHECK(z3.last_sums_sent == P * 4);
  CHECK(z3.last_update_sent == 0);
  want["zero3"] = {{"scatter", 2 * ids},
                   {"all-gather", z3.last_weights_sent},
                   {"reduce-scatter", z3.last_sums_sent}};
  REQUIRE(r.ddp.ran);
  CHECK(r.ddp.measured_sent == r.ddp.sent_by_rank);
  want["ddp"] = {{"scatter", 2 * ids}, {"all-reduce", r.ddp.sent_total()}};
  REQUIRE(r.schedules.size() == 3);
  for (const WalkthroughPipeline& p : r.schedules) {
    // Each row's hidden states forward and their gradients back, over one boundary.
    CHECK(p.boundary_bytes == 2 * B * T * H * 4);
    want["pp-" + p.schedule] = {{"scatter", 2 * ids}, {"stage to stage", p.boundary_bytes}};
  }
  REQUIRE(r.tensor.ranks == 2);
  CHECK(r.tensor.bytes_moved == r.tensor.bytes_expected);
  want["tp"] = {{"scatter", 4 * ids}, {"all-reduce", r.tensor.bytes_moved}};
  REQUIRE(sections.size() == want.size());

  if (!test::chromium_ready()) return;
  test::TempDir tmp("fanout-walkthrough-html");
  std::ofstream(tmp / "walk.html") << page;
  REQUIRE(test::chromium_run(tmp, {"--dump-dom"}, "file://" + tmp / "walk.html", tmp / "dom.log") ==
          0);
  const std::map<std::string, Drawn> drawn = drawn_sections(read_text(tmp / "dom.log"));
  CHECK(drawn.size() == sections.size());
  for (const PageSection& s : sections) {
    CAPTURE(s.id);
    REQUIRE(drawn.count(s.id) == 1);
    const Drawn& d = drawn.at(s.id);
    REQUIRE(want.count(s.id) == 1);
    CHECK(d.bytes == want.at(s.id));
    for (const auto& [kind, bytes] : d.bytes) {
      CAPTURE(kind);
      CHECK(d.label.at(kind) == bytes_str(static_cast<size_t>(bytes)));
    }
    // The memory kinds: each device's allocator peaks over the mode.
    REQUIRE(s.memory.size() == 2);
    for (const presentation::DevicePeak& p : s.memory)
      for (size_t k = 0; k < std::size(kKinds); ++k) {
        const std::string key = p.device + " " + kKinds[k];
        CAPTURE(key);
        REQUIRE(d.holds.count(key) == 1);
        CHECK(d.holds.at(key) == static_cast<int64_t>(p.tag(kTags[k])));
      }
    // A lane for every stream the trace recorded in the step, and for each device.
    const std::vector<std::string> lanes = presentation::timeline_lanes(s.step.spans);
    CHECK(d.lanes == std::set<std::string>(lanes.begin(), lanes.end()));
    for (const char* device : {"cpu:0", "cpu:1"}) {
      int on_device = 0;
      for (const std::string& l : d.lanes) on_device += l.rfind(std::string(device) + " ", 0) == 0;
      CHECK(on_device >= 1);
    }
  }
  // The streams each mode runs on: both compute streams; the comm stream of the
  // primary that overlap's buckets are reduced onto; both comm streams where
  // every device takes part in the collectives (zero3's, ddp's all-reduces).
  auto has_lane = [&](const char* id, int rep, const char* what) {
    return drawn.at(id).lanes.count(parallel::replica_lane(o.devices, rep, what)) == 1;
  };
  for (const char* id : {"dp", "dp-overlap", "zero1", "zero3", "ddp"})
    for (int rep = 0; rep < 2; ++rep) CHECK(has_lane(id, rep, "compute"));
  CHECK(has_lane("dp-overlap", 0, "comm"));
  CHECK_FALSE(has_lane("dp", 0, "comm"));
  for (const char* id : {"zero3", "ddp"})
    for (int rep = 0; rep < 2; ++rep) CHECK(has_lane(id, rep, "comm"));

  // Laid out at 1280 pixels: no text past its picture or over another.
  const std::vector<std::string> layout = test::chromium_layout_report(tmp, tmp / "walk.html");
  std::string problems;
  int texts = 0, width = 0;
  for (const std::string& line : layout) {
    if (line.rfind("texts ", 0) == 0)
      texts = std::stoi(line.substr(6));
    else if (line.rfind("page_width ", 0) == 0)
      width = std::stoi(line.substr(11));
    else if (line.rfind("load_ms ", 0) != 0)
      problems += line + "\n";
    if (line.rfind("load_ms ", 0) == 0) MESSAGE("the page loaded in " << line.substr(8) << " ms");
  }
  CHECK(problems == "");
  CHECK(texts > 200);
  CHECK(width > 0);
  CHECK(width <= 1280);
  CHECK(test::chromium_left_running(tmp) == 0);
}

TEST_CASE("the walkthrough page stays laid out on six devices") {
  // Boxes too narrow for the kinds' lines: the bars keep each kind's bytes.
  WalkthroughOptions o;
  o.devices = devices_parse("cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5");
  o.batch_size = 6;
  o.steps = 1;
  o.timed_steps = 1;
  std::ostringstream text;
  const WalkthroughResult r = walkthrough_run(o, text);
  const std::vector<PageSection> sections = walkthrough_sections(r, o);
  const std::string page = walkthrough_html(sections, walkthrough_page_info(o, r.parameters, "x"));
  CHECK(xml_problem(page) == "");
  // Every section on cpu:5 (the pipelines use 4, tensor parallelism 2): its 7 kinds.
  size_t on_last = 0;
  for (const PageSection& s : sections)
    for (const PageBox& b : s.boxes) on_last += b.device == "cpu:5";
  CHECK(on_last == 7);
  CHECK(count_of(page, "<g class=\"hold\" data-device=\"cpu:5\"") == 7 * on_last);
  if (!test::chromium_ready()) return;
  test::TempDir tmp("fanout-walkthrough-six");
  std::ofstream(tmp / "walk.html") << page;
  std::string problems;
  for (const std::string& line : test::chromium_layout_report(tmp, tmp / "walk.html"))
    if (line.rfind("cut ", 0) == 0 || line.rfind("overlap ", 0) == 0 || line.rfind("error", 0) == 0)
      problems += line + "\n";
  CHECK(problems == "");
  CHECK(test::chromium_left_running(tmp) == 0);
}

TEST_CASE("the layout check finds overlapping and cut texts") {
  // The check above must be able to fail.
  if (!test::chromium_ready()) return;
  test::TempDir tmp("fanout-walkthrough-layout");
  std::ofstream(tmp / "bad.html")
      << "<!DOCTYPE html><html><body><section id=\"s\"><svg class=\"diagram\" "
         "xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 200 50\" width=\"200\" "
         "height=\"50\"><text x=\"10\" y=\"20\">first label</text><text x=\"14\" "
         "y=\"22\">second label</text><text x=\"150\" y=\"40\">past the edge</text></svg>"
         "</section></body></html>";
  const std::vector<std::string> layout = test::chromium_layout_report(tmp, tmp / "bad.html");
  std::string all;
  for (const std::string& line : layout) all += line + "\n";
  CAPTURE(all);
  CHECK(all.find("overlap s diagram: first label | second label") != std::string::npos);
  CHECK(all.find("cut s diagram: past the edge") != std::string::npos);
  CHECK(all.find("texts 3") != std::string::npos);
}

TEST_CASE("the walkthrough page escapes what it did not write and draws only finite numbers") {
  PageSection s;
  s.id = "x\"><script>alert(1)</script>";
  s.name = "<b>mode</b>";
  s.title = "a & b <i>";
  s.flags = "fanout train --devices 'cpu:0' --out \"<run>\"";
  s.explain = {"it's <em>bold</em>"};
  s.boxes = {{"<box>", "cpu:0", "role & <more>"}, {"box 2", "cpu:1", ""}};
  presentation::DevicePeak p;
  p.device = "cpu:0";
  p.peak_bytes = 100;
  s.memory = {p};
  PageMove m;
  m.kind = "reduce";
  m.what = "<gradients> & more";
  m.from = {1};
  m.to = {0};
  m.bytes = 12345;
  m.counter = "a \"counter\"";
  s.moves = {m};
  s.step.spans = {{"lane <1>", "F3", 10, 20}, {"lane <1>", "<odd>", 15, 12}};
  s.step.t0_us = 10, s.step.t1_us = 5;  // ends before it begins
  s.timed_ms = {std::nan(""), 1e308, -1};
  s.note = "<note>";
  PageInfo info;
  info.command = "fanout walkthrough --trace '<script>x</script>.json'";
  info.trace_path = "/tmp/<script>x</script>.json";
  info.devices = "cpu:0 & cpu:1";
  info.build = "<build>";
  const std::string page = walkthrough_html({s}, info);
  CHECK(xml_problem(page) == "");
  CHECK(count_of(page, "<script") == 0);
  // The id in the nav, the summary table and the section; the command; the trace.
  CHECK(count_of(page, "&lt;script&gt;") == 5);
  for (const char* raw : {"<b>", "<i>", "<em>", "<box>", "<more>", "<gradients>", "<odd>", "<note>",
                          "<build>", "<run>", "lane <1>"})
    CHECK_MESSAGE(count_of(page, raw) == 0, raw);
  CHECK_FALSE(test::has_non_finite_coordinate(page));
  CHECK(count_of(page, "nan") == 0);
  CHECK(count_of(page, "inf\"") == 0);
  CHECK(count_of(page, "data-bytes=\"12345\"") == 1);
  CHECK(count_of(page, "<tspan class=\"bytes\">12.1 KiB</tspan>") == 1);
  CHECK(count_of(page, "12,345 bytes") == 1);
  // Without sections or spans: a page all the same.
  const std::string empty = walkthrough_html({}, PageInfo{});
  CHECK(xml_problem(empty) == "");
  PageSection bare;
  bare.id = bare.name = "bare";
  const std::string one = walkthrough_html({bare}, PageInfo{});
  CHECK(xml_problem(one) == "");
  CHECK(count_of(one, "no timeline") == 1);
}
