#!/usr/bin/env bash
# ctest gpu_check.fault: tools/gpu/check.sh on a broken fake bundle (bin/fanout exits 1,
# the GPU suite fails one case, no fanout_tests): failed rows, later steps still run
# and report, at most 8 files in --out, a non-zero exit. Then the early stop without
# a GPU, the time guard and bad arguments.
# Usage: check_fault.sh SOURCE_DIR
set -euo pipefail
check=$1/tools/gpu/check.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-fault.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
summary=$tmp/out/summary.md
fail() {
  echo "FAILED: $*"
  cat "$summary" 2>/dev/null || true
  exit 1
}
has() { grep -qF -- "$1" "$summary" || fail "no '$1' in summary.md"; }

# The fake bundle, in the layout tools/gpu/bundle.sh makes.
b=$tmp/bundle
mkdir -p "$b/bin" "$b/lib" "$b/reference"
printf '#!/bin/sh\necho "fake fanout: $*" >&2\nexit 1\n' >"$b/bin/fanout"
cat >"$b/bin/fanout_gpu_tests" <<'SH'
#!/bin/sh
echo "[doctest] test cases: 3 | 2 passed | 1 failed | 0 skipped"
exit 1
SH
chmod +x "$b/bin/fanout" "$b/bin/fanout_gpu_tests"
printf 'test_rmsnorm_cuda.cpp\ntest_matmul_cuda.cpp\n' >"$b/gpu_tests.txt"
# shellcheck disable=SC2016  # expanded when env.sh is sourced
echo 'export FANOUT_BINARY="$(dirname "${BASH_SOURCE[0]}")/bin/fanout"' >"$b/env.sh"
echo "commit: fake1234" >"$b/MANIFEST.txt"

# 1. --cpu --quick: every step runs and reports, failing.
rc=0
"$check" --cpu --quick --out "$tmp/out" "$b" >"$tmp/log" 2>&1 || rc=$?
[ -f "$summary" ] || { cat "$tmp/log"; fail "no summary.md (exit $rc)"; }
[ "$rc" -ne 0 ] || fail "exit 0 on a broken bundle"
has "- commit: fake1234"
has "| 1 | env.sh | passed"
has "| 1 | ldd of the binaries | failed"
has "| 1 | fanout devices | failed | exit 1"
has "| 2 | fanout_gpu_tests without a GPU | failed | exit 1; 2/3 test cases passed, 1 failed"
has "| 2 | CPU twin: test_rmsnorm.cpp | failed | not found (exit 127)"
has "| 3 | fanout train --devices cpu:0 --steps 30 (the default) | failed | exit 1"
has "| 3 | generate greedy: cpu:0 vs cpu:0 | failed | no checkpoint"
has "| 3 | cpu:0,cpu:0 --strategy zero3 = cpu:0 | failed"
has "| 3 | fanout launch --nproc-per-node 1 -- train --strategy ddp = cpu:0 | failed"
has "| 4 | fanout bench --devices cpu:0"
grep -qE '^\| 4 \| fanout bench [^|]* \| failed \| exit 1' "$summary" || fail "the bench row did not fail"
has "| 5 | compute-sanitizer --tool racecheck | skipped"
! grep -qF "| not reached |" "$summary" || fail "a step was not reached"
n=$(find "$tmp/out" -mindepth 1 | wc -l)
[ "$n" -le 8 ] || fail "$n entries in the out folder, at most 8"
grep -q "fake fanout: train" "$tmp/out/e2e.txt" || fail "e2e.txt lacks the run's output"

# 2. GPU mode: no GPU seen, so after the environment everything is "not reached".
rm -rf "$tmp/out"
rc=0
"$check" --out "$tmp/out" "$b" >"$tmp/log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "GPU mode without a GPU: exit $rc, expected 1"
has "| 1 | fanout devices | failed | no GPU seen"
has "| 2 | GPU suite: test_matmul_cuda.cpp | not reached"
has "| 3 | fanout launch --nproc-per-node 1 -- train --strategy ddp = cuda:0 | not reached"
has "| 5 | compute-sanitizer --tool memcheck | "
! grep -qE '^\| [2-5] \| .* \| (passed|failed) \|' "$summary" || fail "a step after the stop ran"

# 3. The time guard: a 6 s budget leaves nothing to start.
rm -rf "$tmp/out"
rc=0
"$check" --cpu --quick --budget 6 --out "$tmp/out" "$b" >"$tmp/log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "--budget 6: exit $rc, expected 1"
has "| 3 | fanout train --devices cpu:0 --steps 30 (the default) | not reached"

# 4. Bad arguments: one line, exit 2.
for args in "--bogus" "--budget x" "--budget 0" "--out" "$b $b" "$tmp/none"; do
  rc=0
  # shellcheck disable=SC2086  # the arguments are words
  err=$("$check" $args 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "'check.sh $args': exit $rc, expected 2"
  [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] || fail "'check.sh $args': not one line: $err"
done
"$check" --help | grep -q '^usage: tools/gpu/check.sh' || fail "--help prints no usage"
echo "ok: failed rows, every step reported, the stop, the time guard and bad arguments"
