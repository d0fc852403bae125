#!/usr/bin/env bash
# Build fanout with sanitizers and run the whole ctest suite under them, without
# CI: AddressSanitizer + UndefinedBehaviorSanitizer ("asan") and ThreadSanitizer
# ("tsan"), each in its own build directory (CUDA off). Every process, the CLI
# tests' child `fanout` processes included, writes its reports to its own file
# under the log directory; the summary counts them. docs/sanitizers.md explains
# the options and every suppression.
#
#   tools/sanitize.sh [asan|tsan|all|demo] [--logs DIR] [--jobs N] [--timeout S]
#                     [--build-only] [-- extra ctest arguments, e.g. -R devices]
#
# `demo` builds tools/tsan_tbb_demo.cpp under TSan and counts the reports of each
# pattern (the false positives of uninstrumented oneTBB and libstdc++).
# Exit status: 0 when every test passed and no sanitizer report was written.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
kinds=()
logs=""
jobs=2
timeout=""
build_only=0
ctest_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    asan | tsan) kinds+=("$1") ;;
    all) kinds+=(asan tsan) ;;
    demo) kinds+=(demo) ;;
    --logs) logs=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --build-only) build_only=1 ;;
    --) shift; ctest_extra=("$@"); break ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ ${#kinds[@]} -eq 0 ]] && kinds=(asan tsan)
logs=${logs:-$repo/build-sanitize-logs}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# `nice` so that a run on a shared machine leaves room for everyone else.
nice_cmd=(nice -n 10)

# The patterns that start one report each, by sanitizer.
report_patterns='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer'

# ":suppressions=tools/<name>.supp" when that file exists (a missing file is fatal).
supp() {
  [[ -f $repo/tools/$1.supp ]] && echo ":suppressions=$repo/tools/$1.supp"
}

run_kind() {
  local kind=$1 sanitize build dir
  case "$kind" in
    asan) sanitize=address,undefined ;;
    tsan) sanitize=thread ;;
  esac
  build=$repo/build-$kind
  dir=$logs/$kind
  mkdir -p "$dir"
  echo "== $kind: configure and build in $build (-fsanitize=$sanitize, -O1 -g)"
  # RelWithDebInfo with -O1: fast enough to run the suite, exact enough to read
  # the stacks, and no TBB_USE_DEBUG (which Debug would add) so oneTBB's headers
  # are the ones a normal build uses.
  if ! "${nice_cmd[@]}" cmake -S "$repo" -B "$build" -G Ninja -DFANOUT_CUDA=OFF \
      -DFANOUT_SANITIZE=$sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" "${launcher[@]}" >"$dir/configure.log" 2>&1 ||
     ! "${nice_cmd[@]}" cmake --build "$build" -j "$jobs" >"$dir/build.log" 2>&1; then
    tail -n 30 "$dir/configure.log" "$dir/build.log"
    echo "sanitize.sh: $kind build failed (logs in $dir)" >&2
    return 1
  fi
  [[ $build_only -eq 1 ]] && return 0

  local reports=$dir/reports
  rm -rf "$reports" && mkdir -p "$reports"
  # log_path: each process (the test binary, every `fanout` it spawns) writes
  # <prefix>.<exe>.<pid>; nothing goes to the tests' stderr, so the CLI tests'
  # "one stderr line" checks still see only the program's own output.
  local common="log_path=$reports/$kind:log_exe_name=1:print_stacktrace=1"
  UBSAN_OPTIONS="$common:halt_on_error=1$(supp ubsan)"
  ASAN_OPTIONS="$common:halt_on_error=1:detect_leaks=1:check_initialization_order=1"
  ASAN_OPTIONS+=":strict_init_order=1:detect_stack_use_after_return=1$(supp asan)"
  LSAN_OPTIONS="$(supp lsan)"
  # halt_on_error=0: collect every race of a test (the process still exits 66,
  # so the test fails); history_size 4 keeps the "previous access" stacks;
  # print_suppressions lists what tools/tsan.supp hid, so the summary counts it.
  TSAN_OPTIONS="$common:halt_on_error=0:second_deadlock_stack=1:history_size=4"
  TSAN_OPTIONS+=":print_suppressions=1$(supp tsan)"
  export UBSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS
  # Under sanitizers the suite runs 3-15x slower than the plain one.
  local t=${timeout:-$([[ $kind == tsan ]] && echo 3600 || echo 1800)}

  echo "== $kind: ctest -j$jobs --timeout $t (logs in $dir)"
  local start=$SECONDS
  "${nice_cmd[@]}" ctest --test-dir "$build" -j "$jobs" --timeout "$t" --output-on-failure \
    --output-log "$dir/ctest-output.log" "${ctest_extra[@]}" >"$dir/ctest-console.log" 2>&1
  local ctest_rc=$? secs=$((SECONDS - start))
  unset UBSAN_OPTIONS ASAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS
  summarize "$kind" "$dir" "$secs" | tee "$dir/summary.txt"
  [[ $ctest_rc -eq 0 ]] && ! grep -qE "$report_patterns" -r "$reports"
}

summarize() {
  local kind=$1 dir=$2 secs=$3 files
  echo "== $kind summary ($(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$repo" rev-parse --short HEAD 2>/dev/null) + working tree, ${secs} s)"
  grep -E "tests passed|tests failed out of" "$dir/ctest-console.log" | tail -1
  grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)" \
    "$dir/ctest-console.log" | sed 's/^/  failed: /'
  files=$(grep -lE "$report_patterns" -r "$dir/reports" 2>/dev/null | wc -l)
  echo "report files (processes with a finding): $files"
  local p n
  for p in "ERROR: AddressSanitizer" "ERROR: LeakSanitizer" "runtime error:" "WARNING: ThreadSanitizer"; do
    n=$(cat "$dir"/reports/* 2>/dev/null | grep -c "$p")
    [[ $n -gt 0 ]] && echo "  reports with '$p': $n"
  done
  # Reports that escaped log_path (printed to a test's stderr) would show here.
  local stray
  stray=$(grep -cE "$report_patterns" "$dir/ctest-output.log" 2>/dev/null)
  echo "reports in the ctest output itself: ${stray:-0}"
  echo "distinct findings (SUMMARY lines, by count):"
  cat "$dir"/reports/* 2>/dev/null | grep -E "^SUMMARY: |: runtime error:" |
    sed -E 's/^SUMMARY: //; s/ \(pid=[0-9]+\)//' | sort | uniq -c | sort -rn | head -40
  # TSan lists what its suppression file hid ("Matched N suppressions").
  echo "suppressed (by tools/*.supp): $(cat "$dir"/reports/* 2>/dev/null |
    sed -nE 's/.*Matched ([0-9]+) suppressions.*/\1/p' | awk '{s += $1} END {print s + 0}')"
}

# Each mode of the demo with the number of TSan reports it gets; the "fixed"
# and one-thread modes must get none, the others show the false positives.
run_demo() {
  local dir=$logs/demo exe
  mkdir -p "$dir"
  exe=$dir/tsan_tbb_demo
  echo "== demo: $exe"
  "${nice_cmd[@]}" g++ -std=c++20 -O1 -g -fsanitize=thread -fno-omit-frame-pointer \
    "$repo/tools/tsan_tbb_demo.cpp" -o "$exe" -ltbb || return 1
  local mode n
  for mode in queue-tbbmalloc queue-malloc parallel-for parallel-for-1 task-group \
              exception-ptr exception-moved; do
    TSAN_OPTIONS="halt_on_error=0:exitcode=0" "$exe" "$mode" >"$dir/$mode.log" 2>&1
    n=$(grep -c "WARNING: ThreadSanitizer" "$dir/$mode.log")
    printf '  %-16s %4d reports\n' "$mode" "$n"
  done | tee "$dir/summary.txt"
  ! grep -qE "(queue-malloc|parallel-for-1|exception-moved) +[1-9]" "$dir/summary.txt"
}

status=0
for kind in "${kinds[@]}"; do
  if [[ $kind == demo ]]; then
    run_demo || status=1
  else
    run_kind "$kind" || status=1
  fi
done
exit $status
