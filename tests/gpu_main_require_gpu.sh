#!/usr/bin/env bash
# ctest gpu_main.require_gpu: where a GPU is expected (FANOUT_REQUIRE_GPU=1) but none
# is usable, the GPU suite fails (exit 1, not 0, not 77 "skipped") with one line
# naming the reason, the same one `fanout devices` gives (tests/gpu_main.cpp).
# Usage: gpu_main_require_gpu.sh FANOUT_GPU_TESTS FANOUT
set -euo pipefail
gpu_tests=$1 fanout=$2
reason=$("$fanout" devices | sed -n 's/^cuda: //p')
if "$fanout" devices | grep -q '^cuda:0:'; then
  echo "skipped: this machine has a usable GPU"
  exit 77
fi
rc=0
out=$(FANOUT_REQUIRE_GPU=1 "$gpu_tests" 2>&1) || rc=$?
echo "$out"
fail() {
  echo "FAILED: $*"
  exit 1
}
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1"
[ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] || fail "expected one line"
[[ "$out" == *"FANOUT_REQUIRE_GPU=1"* ]] || fail "the line does not say why a GPU is expected"
if [ -z "$reason" ] || [[ "$out" != *"$reason"* ]]; then fail "the line lacks the reason: '$reason'"; fi
# Without the variable (and without /dev/nvidia*) it is still "skipped".
if ! compgen -G '/dev/nvidia*' >/dev/null; then
  rc=0
  FANOUT_REQUIRE_GPU=0 "$gpu_tests" >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 77 ] || fail "without FANOUT_REQUIRE_GPU=1: exit code $rc, expected 77"
fi
echo "ok: exit 1 with the reason"
