#!/usr/bin/env bash
# ctest gpu_check.cpu: tools/gpu/check.sh --cpu --quick on this build dir passes, and
# its summary.md has the header and every step's row, none failed or not reached.
# Usage: check_cpu.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
root=$1 build=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-cpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAILED: $*"
  cat "$tmp/out/summary.md" 2>/dev/null || true
  exit 1
}

rc=0
"$root/tools/gpu/check.sh" --cpu --quick --out "$tmp/out" "$build" >"$tmp/log" 2>&1 || rc=$?
summary=$tmp/out/summary.md
[ -f "$summary" ] || { cat "$tmp/log"; fail "no summary.md (exit $rc)"; }
[ "$rc" -eq 0 ] || fail "check.sh exited $rc"

for line in "- date: " "- host: " "- card: " "- commit: " "- mode: cpu, quick"; do
  grep -qF -- "$line" "$summary" || fail "no header line '$line'"
done
# Every step's rows: "| STEP | CHECK | RESULT" (fixed strings).
rows=(
  "| 1 | nvidia-smi | " "| 1 | CUDA toolkit" "| 1 | env.sh | skipped" "| 1 | python with torch"
  "| 1 | ldd of the binaries | passed" "| 1 | fanout devices | passed"
  "| 2 | CPU twin: test_rmsnorm.cpp | passed"
  "| 3 | fanout train --devices cpu:0 --steps 30 (the default) | passed"
  "| 3 | generate greedy: cpu:0 vs cpu:0 | passed" "| 3 | fanout train --preset small"
  "| 3 | cpu:0, 5 steps, seed 7 (the reference below) | passed"
  "| 3 | cpu:0,cpu:0 --strategy dp --loss-on output = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy dp = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy dp --overlap = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy zero1 = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy zero2 = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy zero3 = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy dp --offload optimizer = cpu:0 | passed"
  "| 3 | cpu:0,cpu:0 --strategy zero3 --offload optimizer = cpu:0 | passed"
  "| 3 | fanout train --devices cpu:0,cpu:0 --batch-size auto --device-memory 64MiB | passed"
  "| 3 | fanout walkthrough --devices cpu:0,cpu:0 --html OUT/walkthrough.html | passed"
  "| 3 | fanout launch --nproc-per-node 1 -- train --strategy ddp = cpu:0 | passed"
  "| 4 | fanout bench --devices cpu:0" "| 5 | compute-sanitizer --tool memcheck | skipped"
  "| 5 | compute-sanitizer --tool racecheck | skipped"
)
for r in "${rows[@]}"; do grep -qF -- "$r" "$summary" || fail "no row '$r'"; done
# Exit 77 without a GPU (a machine with one runs the file).
grep -qE '^\| 2 \| fanout_gpu_tests without a GPU \| (skipped \| exit 77: skipped: |passed)' "$summary" ||
  fail "fanout_gpu_tests neither skipped (77) nor passed"
# The twins' counts come from doctest's summary line.
grep -qE '^\| 2 \| CPU twin: test_rmsnorm.cpp \| passed \| ([1-9][0-9]*)/\1 test cases passed' "$summary" ||
  fail "no test case count in the test_rmsnorm.cpp row"
! grep -qE '\| (failed|not reached) \|' "$summary" || fail "a row failed or was not reached"
[ "$(grep -c '| passed |' "$summary")" -ge 15 ] || fail "fewer than 15 passed rows"
[ -s "$tmp/out/bench.json" ] || fail "no bench.json"
grep -q '<section class="mode" id="zero3">' "$tmp/out/walkthrough.html" || fail "no walkthrough page"
n=$(find "$tmp/out" -mindepth 1 | wc -l)
[ "$n" -le 8 ] || fail "$n entries in the out folder, at most 8"
[ -z "$(find "$tmp/out" -mindepth 1 -type d)" ] || fail "a folder in the out folder (checkpoints?)"
cat "$summary"
echo "ok: check.sh --cpu --quick passed with every row"
