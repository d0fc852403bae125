#include "tests/apps/fanout/chromium_util.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/apps/fanout/command_util.h"

namespace fanout::test {

namespace {

namespace fs = std::filesystem;

const char* const kChromium = "/usr/bin/chromium";

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

// The layout check: the page in an iframe, every SVG text's box measured once it
// has loaded; the report replaces the <pre>'s text, which --dump-dom prints.
const char* const kLayoutCheck = R"(<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="PAGE" style="width:1280px;height:900px;border:0"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById('f').addEventListener('load', () => {
  const out = [];
  try {
    const win = document.getElementById('f').contentWindow, doc = win.document;
    const nav = win.performance.getEntriesByType('navigation')[0];
    out.push('load_ms ' + (nav ? nav.loadEventStart.toFixed(1) : -1));
    out.push('page_width ' + doc.documentElement.scrollWidth);
    let n = 0;
    for (const svg of doc.querySelectorAll('svg')) {
      const box = svg.viewBox.baseVal;
      const section = svg.closest('section');
      const where = (section ? section.id : 'top') + ' ' + svg.getAttribute('class');
      const texts = [...svg.querySelectorAll('text')].map(t => ({t, b: t.getBBox()}));
      n += texts.length;
      for (const {t, b} of texts)
        if (b.x < box.x - 0.5 || b.y < box.y - 0.5 || b.x + b.width > box.x + box.width + 0.5 ||
            b.y + b.height > box.y + box.height + 0.5)
          out.push('cut ' + where + ': ' + t.textContent);
      for (let i = 0; i < texts.length; ++i)
        for (let j = i + 1; j < texts.length; ++j) {
          const a = texts[i].b, c = texts[j].b;
          const ox = Math.min(a.x + a.width, c.x + c.width) - Math.max(a.x, c.x);
          const oy = Math.min(a.y + a.height, c.y + c.height) - Math.max(a.y, c.y);
          if (ox > 1 && oy > 1)
            out.push('overlap ' + where + ': ' + texts[i].t.textContent + ' | ' +
                     texts[j].t.textContent);
        }
    }
    out.push('texts ' + n);
  } catch (e) {
    out.push('error ' + e);
  }
  document.getElementById('result').textContent = out.join('\n');
});
</script></body></html>
)";

}  // namespace

bool chromium_ready() {
  if (::access(kChromium, X_OK) == 0) return true;
  if (std::getenv("CI")) FAIL("chromium is not installed (third_party/install_deps.sh)");
  MESSAGE("skipped the rendering: " << kChromium << " is not installed");
  return false;
}

int chromium_run(const TempDir& tmp, const std::vector<std::string>& flags, const std::string& url,
                 const std::string& log) {
  std::vector<std::string> args = {"/usr/bin/timeout",
                                   "-k",
                                   "5",
                                   "90",
                                   kChromium,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--hide-scrollbars",
                                   "--no-first-run",
                                   "--user-data-dir=" + tmp / "chromium-profile"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back(url);
  Command c(args, {"HOME=" + tmp.path}, log);
  return c.wait(120);  // the destructor kills whatever of its group is left
}

int chromium_left_running(const TempDir& tmp) {
  const std::string marker = tmp / "chromium-profile";
  auto count = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string pid = e.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string cmd = read_text(e.path().string() + "/cmdline");
      if (cmd.find(marker) != std::string::npos && std::to_string(::getpid()) != pid) ++n;
    }
    return n;
  };
  // A helper of Chromium's (its crash handler) may take a moment to go after
  // the browser has: what counts is that nothing stays.
  int n = count();
  for (int i = 0; i < 50 && n > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    n = count();
  }
  return n;
}

PngStats png_stats(const TempDir& tmp, const std::string& png) {
  const std::string script = tmp / "png_stats.py";
  std::ofstream(script) << kPngStats;
  Command stats({"/usr/bin/python3", script, png}, {}, tmp / "png_stats.log");
  PngStats s;
  if (stats.wait(60) != 0) {
    FAIL_CHECK("png_stats: " << stats.output());
    return s;
  }
  std::istringstream in(stats.output());
  in >> s.width >> s.height >> s.colours >> s.non_white;
  return s;
}

std::vector<std::string> chromium_layout_report(const TempDir& tmp, const std::string& page) {
  std::string html = kLayoutCheck;
  html.replace(html.find("PAGE"), 4, "file://" + page);
  const std::string check = tmp / "layout-check.html";
  std::ofstream(check) << html;
  const std::string log = tmp / "layout-check.log";
  std::vector<std::string> lines;
  if (chromium_run(tmp, {"--allow-file-access-from-files", "--dump-dom"}, "file://" + check, log) !=
      0) {
    lines.push_back("error: chromium failed: " + read_text(log));
    return lines;
  }
  const std::string dom = read_text(log);
  const size_t at = dom.find("<pre id=\"result\">");
  const size_t end = dom.find("</pre>", at);
  if (at == std::string::npos || end == std::string::npos) {
    lines.push_back("error: no result in the dumped DOM");
    return lines;
  }
  std::istringstream in(dom.substr(at + 17, end - at - 17));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace fanout::test
