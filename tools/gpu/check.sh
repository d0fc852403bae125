#!/usr/bin/env bash
# The one command of a GPU session (docs/gpu.md): environment, the GPU suite one
# test file per process, end-to-end runs on cuda:0 and cuda:0,cuda:0, the bench
# against PyTorch and, time permitting, compute-sanitizer; every step under its
# own timeout and a guard on the time left, continuing past failures, with at
# most 8 files in the out folder and summary.md rewritten after every row.
# --cpu runs the same plumbing on CPU devices (tests/tools/gpu/check_cpu.sh).
set -uo pipefail  # no -e: a failed step is a row, never the end of the check

usage() {
  cat <<'EOF'
usage: tools/gpu/check.sh [--cpu] [--quick] [--out DIR] [--budget SECONDS] [BUNDLE]

Checks a fanout bundle (tools/gpu/bundle.sh; default .gpu-bundle) or a CMake build
dir on this machine; writes 7 files into --out: summary.md, env.txt, gpu_tests.txt,
e2e.txt, bench.txt, bench.json, sanitizer.txt (see docs/gpu.md).

  --cpu             CPU devices instead of cuda:0: the GPU suite's CPU twins run with
                    fanout_tests, GPU-only steps are skipped (not failed)
  --quick           30 default steps, small instead of seed, a tiny bench and (--cpu)
                    4 CPU twins: the ctest case gpu_check.cpu
  --out DIR         the out folder (default: $OUT when set, else ./gpu-check-out)
  --budget SECONDS  the time the whole check may take (default 540: one 600 s command)
  -h, --help        this text

Exit status: 0 when every step ran and passed (--cpu: skipped GPU-only steps too),
1 when one failed or was not reached, 2 for bad arguments.
EOF
}
bad_usage() {
  echo "check.sh: error: $* (see --help)" >&2
  exit 2
}

# --- arguments ------------------------------------------------------------------

cpu=0 quick=0 budget=540 bundle="" out="${OUT:-./gpu-check-out}"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --quick) quick=1 ;;
    --out | --budget)
      if [ $# -lt 2 ] || [ -z "$2" ]; then bad_usage "$1 needs a value"; fi
      if [ "$1" = --out ]; then out=$2; else budget=$2; fi
      shift ;;
    --out=*) out=${1#--out=} ;;
    --budget=*) budget=${1#--budget=} ;;
    -h | --help) usage; exit 0 ;;
    -*) bad_usage "unknown option '$1'" ;;
    *) [ -z "$bundle" ] || bad_usage "one BUNDLE only, got '$bundle' and '$1'"; bundle=$1 ;;
  esac
  shift
done
if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -eq 0 ]; then
  bad_usage "--budget must be a positive number of seconds, got '$budget'"
fi
[ -n "$out" ] || bad_usage "--out is empty"
bundle=${bundle:-.gpu-bundle}
[ -d "$bundle" ] || bad_usage "no bundle or build dir at '$bundle'"
mkdir -p "$out" 2>/dev/null || bad_usage "cannot create the out folder '$out'"
bundle=$(cd "$bundle" && pwd)
out=$(cd "$out" && pwd)

# The repository root (for a build dir: tests/reference and the test list).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -d "$root/tests" ] || root=$PWD

# A CMake build dir, or the bundle layout (docs/gpu.md, "Making the bundle").
if [ -f "$bundle/CMakeCache.txt" ]; then
  layout=build
  fanout=$bundle/apps/fanout/fanout
  gpu_tests=$bundle/tests/fanout_gpu_tests
  cpu_tests=$bundle/tests/fanout_tests
else
  layout=bundle
  fanout=$bundle/bin/fanout
  gpu_tests=$bundle/bin/fanout_gpu_tests
  cpu_tests=$bundle/bin/fanout_tests  # not in a real bundle: --cpu on a bundle fails its twins
fi
if [ "$cpu" = 1 ]; then dev=cpu:0; else dev=cuda:0; fi

# Checkpoints and run dirs live here, never in the out folder (seed: ~2 GB each).
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT  # still through the EXIT trap
# Only our own names: whatever else the folder holds is left alone.
for f in summary.md env.txt gpu_tests.txt e2e.txt bench.json bench.txt sanitizer.txt; do
  rm -f "$out/$f"
done

# --- rows, time and runs ----------------------------------------------------------

t0=$SECONDS
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
card="none"
stop=""  # set when no GPU is seen: later steps are "not reached"
rows_step=() rows_name=() rows_status=() rows_figure=() rows_secs=()

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# Seconds a run may take: its own limit cut to what the budget leaves (5 s kept for
# summary.md); 0 when that is under MIN or the check has stopped.
allowance() {
  local want=$1 min=$2 left=$((budget - (SECONDS - t0) - 5))
  [ -z "$stop" ] || { echo 0; return; }
  [ "$left" -ge "$want" ] || want=$left
  [ "$want" -ge "$min" ] || want=0
  echo "$want"
}

# run LOG LIMIT MIN CMD...: CMD under timeout, output in LOG; sets rc (124: timed
# out, 200: not started for lack of time or after a stop) and secs.
run() {
  local log=$1 limit=$2 min=$3 t s
  shift 3
  t=$(allowance "$limit" "$min")
  : >"$log"
  if [ "$t" -eq 0 ]; then rc=200 secs=0; return; fi
  s=$EPOCHREALTIME
  timeout -k 10 "$t" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  secs=$(elapsed "$s")
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || echo "check.sh: timed out after ${t}s" >>"$log"
}

# Why a run with exit code $1 failed, in a few words.
failure() {
  case "$1" in
    124 | 137) echo "timed out" ;;
    127) echo "not found (exit 127)" ;;
    *) if [ "$1" -gt 128 ]; then echo "killed by signal $(($1 - 128))"; else echo "exit $1"; fi ;;
  esac
}

# append FILE TITLE LOG: LOG under a heading in FILE, at most 1 MiB of it (its first
# and last halves), less as FILE nears 14 MiB, so no out file outgrows what comes
# back from the GPU machine (16 MiB a file).
append() {
  local size cap room
  size=$(stat -c %s "$3" 2>/dev/null || echo 0)
  room=$((14 * 1048576 - $(stat -c %s "$out/$1" 2>/dev/null || echo 0)))
  cap=1048576
  [ "$room" -ge "$cap" ] || cap=$((room > 16384 ? room : 16384))
  {
    printf '\n### %s\n' "$2"
    if [ "$size" -le "$cap" ]; then
      cat "$3"
    else
      head -c $((cap / 2)) "$3"
      printf '\n[... cut: %s bytes in all ...]\n' "$size"
      tail -c $((cap / 2)) "$3"
    fi
  } >>"$out/$1"
}

# row STEP NAME STATUS FIGURE SECS, then summary.md again (a killed check leaves
# the rows it had). After a stop, or for a run that never started, the row reads
# "not reached" with the reason, whatever STATUS says.
row() {
  local status=$3 figure=$4 secs=$5
  if [ -n "$stop" ] || [ "${rc:-0}" -eq 200 ]; then
    status="not reached" figure=${stop:-too little of the budget left} secs=0
  fi
  rows_step+=("$1") rows_name+=("$2") rows_status+=("$status") rows_figure+=("$figure") rows_secs+=("$secs")
  write_summary
  rc=0
}

# check_row STEP NAME LOGFILE TITLE FIGURE: passed when rc is 0, else failed with why.
check_row() {
  append "$3" "$4 (${secs}s, exit $rc)" "$work/log"
  if [ "$rc" -eq 0 ]; then row "$1" "$2" passed "$5" "$secs"; else row "$1" "$2" failed "$(failure "$rc")${5:+; $5}" "$secs"; fi
}

commit() {
  if [ -f "$bundle/MANIFEST.txt" ]; then
    grep -im1 'commit' "$bundle/MANIFEST.txt" | sed 's/^[^:=]*[:=][[:space:]]*//' && return
  fi
  local c
  c=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
  git -C "$root" diff --quiet HEAD 2>/dev/null || c="$c (with uncommitted changes)"
  echo "$c"
}

write_summary() {
  local i mode=gpu
  [ "$cpu" = 0 ] || mode=cpu
  [ "$quick" = 0 ] || mode="$mode, quick"
  {
    echo "# fanout GPU check"
    echo
    echo "- date: $started"
    echo "- host: $(uname -n)"
    echo "- card: $card"
    echo "- commit: $(commit)"
    echo "- mode: $mode; $layout $bundle; device $dev; budget ${budget}s, used $((SECONDS - t0))s"
    echo
    echo "| step | check | result | figures | time (s) |"
    echo "|---|---|---|---|---|"
    for i in "${!rows_name[@]}"; do
      printf '| %s | %s | %s | %s | %s |\n' "${rows_step[$i]}" "${rows_name[$i]//|/\\|}" \
        "${rows_status[$i]}" "${rows_figure[$i]//|/\\|}" "${rows_secs[$i]}"
    done
  } >"$out/summary.md"
}

# --- 1. environment ---------------------------------------------------------------

step_environment() {
  local s=1 f=env.txt
  {
    echo "# environment ($started)"
    echo "host: $(uname -n); kernel: $(uname -sr)"
    echo "bundle: $bundle ($layout); out: $out"
  } >"$out/$f"

  # nvidia-smi: the card, its driver, what else runs on it.
  if command -v nvidia-smi >/dev/null; then
    run "$work/log" 30 5 nvidia-smi
    if [ "$rc" -eq 0 ]; then
      card=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
        head -n1 | sed 's/, / \/ /g')
      card=${card:-unknown}
    fi
    check_row $s "nvidia-smi" $f "nvidia-smi" "$card"
  elif [ "$cpu" = 1 ]; then
    row $s "nvidia-smi" skipped "no nvidia-smi (--cpu)" 0
  else
    row $s "nvidia-smi" failed "nvidia-smi not found" 0
  fi

  # The toolkit: a prebuilt binary needs only its libraries, compute-sanitizer its tools.
  local nvcc nv tk versions
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  nv=$("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)
  tk=$(grep -A3 '"cuda"' /usr/local/cuda/version.json 2>/dev/null | grep -o '"version" *: *"[0-9.]*"' |
    grep -o '[0-9][0-9.]*' | head -n1)
  [ -n "$tk" ] || tk=$(grep -o 'Version [0-9.]*' /usr/local/cuda/version.txt 2>/dev/null | cut -d' ' -f2)
  versions="${nv:+nvcc $nv}${nv:+${tk:+, }}${tk:+toolkit $tk}"
  {
    printf '\n### toolkit\n'
    "$nvcc" --version 2>&1
    cat /usr/local/cuda/version* 2>&1
  } >>"$out/$f"
  if [ -n "$versions" ]; then
    row $s "CUDA toolkit (nvcc, /usr/local/cuda/version*)" passed "$versions" 0
  elif [ "$cpu" = 1 ]; then
    row $s "CUDA toolkit (nvcc, /usr/local/cuda/version*)" skipped "none found (--cpu)" 0
  else
    row $s "CUDA toolkit (nvcc, /usr/local/cuda/version*)" failed "neither nvcc nor /usr/local/cuda/version*" 0
  fi

  # env.sh: tried in a subshell first (an `exit` in it must not end the check).
  # shellcheck disable=SC1091
  if [ "$layout" = build ]; then
    export FANOUT_BINARY=$fanout FANOUT_REFERENCE_DIR=$root/tests/reference
    row $s "env.sh" skipped "a build dir: the environment as it is" 0
  elif [ ! -f "$bundle/env.sh" ]; then
    row $s "env.sh" failed "no env.sh in the bundle" 0
  elif (set +eu; source "$bundle/env.sh") >"$work/log" 2>&1; then
    set +u
    source "$bundle/env.sh" >/dev/null 2>&1
    set -u
    append $f "env.sh" "$work/log"
    row $s "env.sh" passed "" 0
  else
    append $f "env.sh (failed)" "$work/log"
    row $s "env.sh" failed "sourcing it failed" 0
  fi
  {
    printf '\n### variables\n'
    env | grep -E '^(FANOUT_|LD_LIBRARY_PATH=|PATH=|CUDA)' | sort
  } >>"$out/$f"

  # The python with torch (reference scripts, the bench's PyTorch peers): FANOUT_PYTHON,
  # else the first of /usr/bin/python3 and python3 that imports torch, as the tests do.
  local py=${FANOUT_PYTHON:-}
  if [ -z "$py" ]; then
    py=python3
    ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || py=/usr/bin/python3
    [ "$layout" = bundle ] || export FANOUT_PYTHON=$py
  fi
  run "$work/log" 60 5 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  local torch_line
  torch_line=$(tail -n1 "$work/log")
  if [ "$rc" -ne 0 ] && [ "$cpu" = 1 ]; then
    append $f "$py with torch" "$work/log"
    row $s "python with torch ($py)" skipped "no torch (--cpu)" "$secs"
  else
    # The GPU's PyTorch peers need a torch that sees it.
    [ "$cpu" = 1 ] || [ "$rc" -ne 0 ] || [[ "$torch_line" != *"cuda False"* ]] || rc=1
    check_row $s "python with torch ($py)" $f "$py with torch" "$torch_line"
    [ "${rows_status[-1]}" != passed ] || torch_ok=1
  fi

  # Both binaries' libraries, after env.sh: nothing may be "not found".
  local b bins=("$fanout" "$gpu_tests") missing="" figure=""
  [ "$cpu" = 0 ] || bins+=("$cpu_tests")
  for b in "${bins[@]}"; do
    run "$work/log" 30 2 ldd "$b"
    append $f "ldd $b (exit $rc)" "$work/log"
    if [ "$rc" -ne 0 ]; then
      missing+=" $(basename "$b"): $( [ -e "$b" ] && echo "not a dynamic executable" || echo "missing");"
    elif grep -q 'not found' "$work/log"; then
      missing+=" $(basename "$b"): $(grep 'not found' "$work/log" | awk '{print $1}' | paste -sd, -) not found;"
    else
      figure+="$(basename "$b") $(grep -c '=>' "$work/log") libs; "
    fi
  done
  if [ -z "$missing" ]; then
    row $s "ldd of the binaries" passed "${figure%; }" 0
  else
    rc=0
    missing=${missing# }
    row $s "ldd of the binaries" failed "${missing%;}" 0
  fi

  # fanout devices: the one thing the rest needs. No GPU seen: the rest is not reached.
  run "$work/log" 60 5 "$fanout" devices
  local cuda_line
  cuda_line=$(grep -m1 '^cuda' "$work/log")
  if [ "$cpu" = 1 ]; then
    check_row $s "fanout devices" $f "fanout devices" "${cuda_line:-no cuda line}"
    return
  fi
  append $f "fanout devices (exit $rc)" "$work/log"
  if [ "$rc" -eq 0 ] && grep -q '^cuda:0:' "$work/log"; then
    row $s "fanout devices" passed "$cuda_line" "$secs"
  else
    row $s "fanout devices" failed "no GPU seen: ${cuda_line:-$(failure "$rc")}" "$secs"
    stop="fanout devices sees no GPU"
  fi
}

# --- 2. the GPU suite, one test file per process ------------------------------------

# The GPU suite's files (test_*_cuda.cpp basenames), one a line.
gpu_files() {
  if [ "$layout" = bundle ]; then
    grep -v '^[[:space:]]*$' "$bundle/gpu_tests.txt" 2>/dev/null
  else
    find "$root/tests" -name 'test_*_cuda.cpp' -printf '%f\n' | sort
  fi
}

# doctest's summary line of LOG as "cases passed failed"; "0 0 0" when there is none.
doctest_counts() {
  local c
  c=$(sed -n 's/.*test cases: *\([0-9]*\) *| *\([0-9]*\) passed *| *\([0-9]*\) failed.*/\1 \2 \3/p' "$1" | tail -n1)
  echo "${c:-0 0 0}"
}

# suite_file NAME BINARY FILE: the test cases of one file in a process of their own,
# so a crash or a sticky CUDA error there hides nothing else.
suite_file() {
  local name=$1 bin=$2 file=$3 total passed failed figure why
  run "$work/log" 120 5 "$bin" --source-file="*/$file"
  append gpu_tests.txt "$name: $(basename "$bin") --source-file='*/$file' (${secs}s, exit $rc)" "$work/log"
  read -r total passed failed <<<"$(doctest_counts "$work/log")"
  figure="$passed/$total test cases passed"
  [ "$failed" -eq 0 ] || figure+=", $failed failed"
  # Cases that return early after MESSAGE("skipped: ...") (e.g. NCCL on one GPU) pass: say so.
  local said
  said=$(grep -c 'MESSAGE: skipped' "$work/log")
  [ "$said" -eq 0 ] ||
    figure+=" ($said said $(grep -m1 -o 'skipped: .*' "$work/log" | cut -c1-100))"
  why=$(grep -m1 -E '^skipped:|error:' "$work/log" | cut -c1-160)
  if [ "$rc" -eq 77 ] && [ "$cpu" = 1 ]; then
    row 2 "$name" skipped "exit 77: ${why:-skipped}" "$secs"
  elif [ "$rc" -eq 77 ]; then
    row 2 "$name" failed "exit 77 (skipped) on a GPU machine: ${why:-no reason given}" "$secs"
  elif [ "$rc" -eq 0 ] && [ "$total" -gt 0 ]; then
    row 2 "$name" passed "$figure" "$secs"
  elif [ "$rc" -eq 0 ]; then
    row 2 "$name" failed "no test case ran" "$secs"
  else
    row 2 "$name" failed "$(failure "$rc"); $figure${why:+; $why}" "$secs"
  fi
}

# The CPU twins --quick keeps: small, quick files that still run every parse path.
quick_twins=" test_residual.cpp test_rmsnorm.cpp test_swiglu.cpp test_embedding.cpp "

step_suite() {
  local f files twin left="" none=""
  echo "# the GPU suite, one test file per process" >"$out/gpu_tests.txt"
  files=$(gpu_files)
  if [ -z "$files" ]; then
    row 2 "GPU suite" failed "no test files listed ($( [ "$layout" = bundle ] && echo "$bundle/gpu_tests.txt" || echo "$root/tests"))" 0
    return
  fi
  if [ "$cpu" = 0 ]; then
    # No usable GPU is a failure with its reason, never "skipped" (tests/gpu_main.cpp).
    export FANOUT_REQUIRE_GPU=1
    for f in $files; do suite_file "GPU suite: $f" "$gpu_tests" "$f"; done
    return
  fi
  # --cpu: the GPU binary once (no GPU: exit 77), then each file's CPU twin.
  suite_file "fanout_gpu_tests without a GPU" "$gpu_tests" "$(head -n1 <<<"$files")"
  for f in $files; do
    twin=${f%_cuda.cpp}.cpp
    if [ "$quick" = 1 ] && [[ "$quick_twins" != *" $twin "* ]]; then
      left+=" $twin"
    elif [ "$layout" = build ] && [ -z "$(find "$root/tests" -name "$twin" -print -quit)" ]; then
      none+=" $f"
    else
      suite_file "CPU twin: $twin" "$cpu_tests" "$twin"
    fi
  done
  [ -z "$none" ] || row 2 "CPU twins" skipped "no CPU twin of${none}" 0
  [ -z "$left" ] || row 2 "CPU twins" skipped "left out by --quick:${left}" 0
}

# --- 3. end to end ----------------------------------------------------------------

# The last step's value of KEY ("loss", "grad_norm") in RUN/metrics.jsonl, or "".
last_metric() {
  grep "\"$2\":" "$1/metrics.jsonl" 2>/dev/null | tail -n1 | sed "s/.*\"$2\":\([^,}]*\).*/\1/"
}

# The median tokens/s of RUN's steps after the first (a warm-up), or "".
tokens_per_s() {
  grep -o '"tokens_per_s":[0-9.e+-]*' "$1/metrics.jsonl" 2>/dev/null | sed 1d | cut -d: -f2 |
    sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f", v[int((NR + 1) / 2)] }'
}

# X with 6 significant digits ("none" when empty).
short() {
  if [ -z "$1" ]; then echo none; else awk -v x="$1" 'BEGIN { printf "%.6g", x }'; fi
}

# Whether A and B agree within TOL * (1 + |B|) (TOL default 1e-3; close_tol sets it
# for the bf16 rows); prints |A - B|.
close_tol=1e-3
close() {
  awk -v a="$1" -v b="$2" -v tol="$close_tol" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
    printf "%.2g", d; exit !(a != "" && b != "" && d <= tol * (1 + m)) }'
}

# The first value of KEY in RUN's metrics.jsonl, or "".
first_metric() {
  grep "\"$2\":" "$1/metrics.jsonl" 2>/dev/null | head -n1 | sed "s/.*\"$2\":\([^,}]*\).*/\1/"
}

# train_run TITLE LIMIT RUN ARGS...: `fanout train --out WORK/RUN ARGS`, logged to e2e.txt;
# sets rc, secs, loss, norm and figure (loss, tokens/s).
train_run() {
  local title=$1 limit=$2 dir=$work/$3 tps
  shift 3
  rm -rf "$dir"
  run "$work/log" "$limit" 10 "$fanout" train --out "$dir" "$@"
  append e2e.txt "$title: fanout train --out $dir $* (${secs}s, exit $rc)" "$work/log"
  loss=$(last_metric "$dir" loss) norm=$(last_metric "$dir" grad_norm) tps=$(tokens_per_s "$dir")
  figure="loss $(short "$loss")${tps:+, $tps tokens/s}"
}

# train_row NAME: a row for the last train_run: passed when it ran and logged a loss.
train_row() {
  if [ "$rc" -ne 0 ]; then
    row 3 "$1" failed "$(failure "$rc"); $figure" "$secs"
  elif [ -z "$loss" ]; then
    row 3 "$1" failed "no loss in metrics.jsonl" "$secs"
  else
    row 3 "$1" passed "$figure" "$secs"
  fi
}

# same_row NAME: the last train_run against the one-device run (ref_loss, ref_norm).
same_row() {
  local dl dn okl okn
  if [ "$rc" -ne 0 ] || [ -z "$loss" ]; then train_row "$1"; return; fi
  dl=$(close "$loss" "$ref_loss"); okl=$?
  dn=$(close "$norm" "$ref_norm"); okn=$?
  if [ "$okl" -eq 0 ] && [ "$okn" -eq 0 ]; then
    row 3 "$1" passed "loss $(short "$loss") vs $(short "$ref_loss") (|d| $dl), grad norm |d| $dn" "$secs"
  else
    row 3 "$1" failed "loss $(short "$loss") vs $(short "$ref_loss") (|d| $dl), grad norm $(short "$norm") vs $(short "$ref_norm") (|d| $dn)" "$secs"
  fi
}

# generate_on DEVICE FILE: the JSON line of `fanout generate --json` on DEVICE from
# the default run's checkpoint into FILE (empty when it failed).
generate_on() {
  run "$work/log" 90 5 "$fanout" generate --checkpoint "$work/default/final" --prompt "Once upon a time" \
    --temperature 0 --max-new-tokens 64 --device "$1" --json
  append e2e.txt "generate --temperature 0 --device $1 (${secs}s, exit $rc)" "$work/log"
  grep -m1 '^{' "$work/log" >"$2"
}

step_e2e() {
  local steps=20 big=(--preset seed --steps 5) s0 a b t
  echo "# end to end on $dev" >"$out/e2e.txt"
  [ "$cpu" = 0 ] || steps=5
  [ "$cpu" = 0 ] && [ "$quick" = 0 ] || big=(--preset small --steps 2 --batch-size 4 --seq-len 64)

  # The default run (--quick: fewer steps); a full one must beat the unigram entropy.
  local quick_steps=()
  [ "$quick" = 0 ] || quick_steps=(--steps 30)
  train_run "default" 240 default --devices "$dev" "${quick_steps[@]}"
  local held
  held=$(grep -o 'held-out loss [0-9.]* nats/token vs [0-9.]*' "$work/log" | awk '{ print $3, $6 }')
  [ -z "$held" ] || figure+=", held-out $(awk '{ print $1 " vs unigram " $2 }' <<<"$held")"
  if [ "$rc" -eq 0 ] && [ "$quick" = 0 ] && [ -n "$held" ] && ! awk '{ exit !($1 < $2) }' <<<"$held"; then
    rc=1 figure="did not learn: $figure"
  fi
  train_row "fanout train --devices $dev${quick_steps[*]:+ ${quick_steps[*]}} (the default)"

  # Greedy text on the device against cpu:0 from the same checkpoint.
  s0=$EPOCHREALTIME
  if [ ! -d "$work/default/final" ]; then
    row 3 "generate greedy: $dev vs cpu:0" failed "no checkpoint (the default run failed)" 0
  else
    generate_on "$dev" "$work/a.json"
    local rc_a=$rc
    generate_on cpu:0 "$work/b.json"
    a=$(cat "$work/a.json") b=$(cat "$work/b.json")
    t=$(grep -o '"text":"[^"]\{0,48\}' <<<"$a" | cut -c9-)
    if [ "$rc_a" -eq 200 ] || [ "$rc" -eq 200 ]; then
      rc=200
      row 3 "generate greedy: $dev vs cpu:0" "not reached" "" 0
    elif [ -n "$a" ] && [ "$a" = "$b" ]; then
      rc=0
      row 3 "generate greedy: $dev vs cpu:0" passed "64 tokens, equal: \"$t...\"" "$(elapsed "$s0")"
    else
      rc=0
      row 3 "generate greedy: $dev vs cpu:0" failed "differ: $dev ${a:-failed} / cpu:0 ${b:-failed}" "$(elapsed "$s0")"
    fi
  fi
  # Checkpoints both ways with HF transformers itself (tests/reference/hf_interop.py):
  # the default run's checkpoint in LlamaForCausalLM (logits and loss against fanout
  # eval on $dev), and a model transformers saved, in fanout eval. --cpu, where
  # transformers is seldom installed, stands llama_ref.py in for it.
  local py=${FANOUT_PYTHON:-/usr/bin/python3} impl=transformers
  [ "$cpu" = 0 ] || "$py" -c 'import transformers' >/dev/null 2>&1 || impl=ref
  if [ ! -d "$work/default/final" ]; then
    row 3 "HF interop ($impl)" failed "no checkpoint (the default run failed)" 0
  else
    run "$work/log" 180 10 "$py" "${FANOUT_REFERENCE_DIR:-$root/tests/reference}/hf_interop.py" \
      --fanout "$fanout" --checkpoint "$work/default/final" --device "$dev" --impl "$impl"
    figure=$(grep -E '^(fanout-to-hf|hf-to-fanout|transformers cannot)' "$work/log" | paste -sd';' - | sed 's/;/; /g')
    check_row 3 "HF interop ($impl): a fanout checkpoint in LlamaForCausalLM, and back" e2e.txt \
      "hf_interop.py --impl $impl" "$figure"
  fi
  rm -rf "$work/default"

  train_run "${big[1]}" 240 big --devices "$dev" "${big[@]}"
  train_row "fanout train ${big[*]}"
  rm -rf "$work/big"

  # Two replicas on one device in every mode against one device: the same losses.
  local mode name common=(--steps "$steps" --seed 7)
  train_run "one device" 120 one --devices "$dev" "${common[@]}"
  train_row "$dev, $steps steps, seed 7 (the reference below)"
  local ref_loss=$loss ref_norm=$norm
  for mode in "dp --loss-on output" "dp" "dp --overlap" "zero1" "zero2" "zero3" \
    "dp --offload optimizer" "zero3 --offload optimizer"; do
    name="$dev,$dev --strategy $mode"
    # shellcheck disable=SC2086  # the mode is words
    train_run "$name" 120 two --devices "$dev,$dev" --strategy $mode "${common[@]}"
    same_row "$name = $dev"
  done
  # The batch-size finder's trials under a cap on the device's own allocator.
  train_run "batch-size auto" 180 auto --devices "$dev,$dev" --batch-size auto \
    --device-memory 64MiB --steps 2
  figure="$(grep -m1 '^batch size auto' "$work/log" | cut -c1-160)"
  train_row "fanout train --devices $dev,$dev --batch-size auto --device-memory 64MiB"
  rm -rf "$work/auto"
  # The walkthrough's page from two replicas on the device: every mode through the
  # same code as on CPU devices, the page itself brought back beside the summary.
  run "$work/log" 180 10 "$fanout" walkthrough --devices "$dev,$dev" --timed-steps 2 \
    --trace "$work/walkthrough-trace.json" --html "$out/walkthrough.html"
  figure="$(grep -m1 '^ *page: ' "$work/log" | sed 's/^ *//' | cut -c1-160)"
  [ "$rc" -ne 0 ] || [ -n "$figure" ] || rc=1 figure="no page written"
  check_row 3 "fanout walkthrough --devices $dev,$dev --html OUT/walkthrough.html" e2e.txt \
    "fanout walkthrough --devices $dev,$dev --html" "$figure"

  # bf16 mixed precision (cuBLASLt, the attention the run names, the fused
  # classifier): the big preset learns, and two replicas in every mode track one
  # device (bf16 roundings differ with the split: 1e-2, not 1e-3).
  local bf16_big=(--preset seed --steps 50) first
  [ "$cpu" = 0 ] && [ "$quick" = 0 ] || bf16_big=(--preset small --steps 6 --batch-size 4 --seq-len 64)
  train_run "bf16 ${bf16_big[1]}" 300 bf16 --devices "$dev" --precision bf16 "${bf16_big[@]}"
  first=$(first_metric "$work/bf16" loss)
  figure="loss $(short "$first") -> $figure, $(grep -m1 '^attention: ' "$work/log" || echo 'attention: not named')"
  if [ "$rc" -eq 0 ] && [ -n "$loss" ] && ! awk -v a="$loss" -v b="$first" 'BEGIN { exit !(a < b) }'; then
    rc=1 figure="did not learn: $figure"
  fi
  train_row "fanout train --precision bf16 ${bf16_big[*]}"
  # The loss curve, every tenth step (and the first), for the log of GPU runs.
  {
    printf 'loss curve (step loss):'
    sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\),.*/\2 \1/p' "$work/bf16/metrics.jsonl" 2>/dev/null |
      awk '$1 == 1 || $1 % 10 == 0 { printf " %d %.4f;", $1, $2 }'
    echo
  } >>"$out/e2e.txt"
  rm -rf "$work/bf16"
  local fp32_loss=$ref_loss fp32_norm=$ref_norm
  close_tol=1e-2
  train_run "bf16 one device" 120 one --devices "$dev" --precision bf16 "${common[@]}"
  train_row "$dev --precision bf16, $steps steps, seed 7 (the reference below)"
  ref_loss=$loss ref_norm=$norm
  for mode in "dp --loss-on output" "dp" "dp --overlap" "zero1" "zero2" "zero3"; do
    name="$dev,$dev --precision bf16 --strategy $mode"
    # shellcheck disable=SC2086  # the mode is words
    train_run "$name" 120 two --devices "$dev,$dev" --precision bf16 --strategy $mode "${common[@]}"
    same_row "$name = $dev"
  done
  close_tol=1e-3 ref_loss=$fp32_loss ref_norm=$fp32_norm

  # One ddp rank under fanout launch.
  rm -rf "$work/launch"
  run "$work/log" 120 10 "$fanout" launch --nproc-per-node 1 -- train --strategy ddp --devices "$dev" \
    "${common[@]}" --out "$work/launch"
  append e2e.txt "fanout launch --nproc-per-node 1 -- train --strategy ddp (${secs}s, exit $rc)" "$work/log"
  loss=$(last_metric "$work/launch" loss) norm=$(last_metric "$work/launch" grad_norm)
  figure="loss $(short "$loss")"
  same_row "fanout launch --nproc-per-node 1 -- train --strategy ddp = $dev"
  rm -rf "$work/one" "$work/two" "$work/launch"
}

# --- 4. the bench -----------------------------------------------------------------

# The bench's summary lines in the last log (best mode, MFU, kernel classes and
# ops), joined by "; ".
bench_figures() {
  grep -E ' best: | best \(.*MFU |^kernel (classes|ops)' "$work/log" | sed 's/^fanout //' | paste -sd';' - | sed 's/;/; /g'
}

step_bench() {
  # The issue's measurement: the seed preset at 16 x 512 in bf16 on one GPU and as
  # two replicas on it, with MFU over the GEMM peak measured in the same run.
  local args=(bench --devices "$dev,$dev" --modes dp,dp-overlap,zero1,zero2,zero3
    --preset seed --batch-size 16 --seq-len 512 --precision bf16 --mfu --kernels --json "$out/bench.json") figure
  echo "# fanout bench on $dev" >"$out/bench.txt"
  [ "$cpu" = 0 ] && [ "$quick" = 0 ] ||
    args=(bench --devices "$dev" --json "$out/bench.json" --preset tiny --steps 2 --warmup 1 --precision fp32 --mfu --kernels)
  # The PyTorch peers when this fanout offers them (on CPU only where torch imports);
  # fanout runs them with FANOUT_PYTHON.
  run "$work/help" 30 2 "$fanout" bench --help
  # A line per figure, as bench_figures reads them (by default fanout wraps its
  # output at 80 columns); before --peers, which a retry drops from the end.
  if grep -q -- '--wide' "$work/help"; then args+=(--wide); fi
  if grep -q -- '--peers' "$work/help" && { [ "$cpu" = 0 ] || [ "$torch_ok" = 1 ]; }; then
    args+=(--peers)
  fi
  run "$work/log" 300 20 "$fanout" "${args[@]}"
  append bench.txt "fanout ${args[*]} (${secs}s, exit $rc)" "$work/log"
  figure=$(bench_figures)
  [[ " ${args[*]} " != *" --peers "* ]] || grep -q 'PyTorch' "$work/log" || figure="no PyTorch row${figure:+; $figure}"
  [[ " ${args[*]} " == *" --peers "* ]] ||
    figure="no peers ($( [ "$cpu" = 1 ] && echo "no torch here" || echo "bench --help offers none"))${figure:+; $figure}"
  check_row 4 "fanout ${args[*]/#$out\//OUT/}" bench.txt "bench" "$figure"
  # Peers failed: fanout's own figures at least, if time allows.
  if [ "${rows_status[-1]}" = failed ] && [[ " ${args[*]} " == *" --peers "* ]]; then
    unset 'args[-1]'
    run "$work/log" 200 20 "$fanout" "${args[@]}"
    append bench.txt "again without --peers (${secs}s, exit $rc)" "$work/log"
    figure=$(bench_figures)
    check_row 4 "fanout ${args[*]/#$out\//OUT/} (no peers)" bench.txt "bench" "$figure"
  fi
}

# ab_row NAME WHAT BASE_ARGS -- FLAG A B: one device in bf16, `bench --modes dp`
# with BASE_ARGS and FLAG A, then FLAG B; the row gives both speeds and B over A.
# A run that prints `could not be recorded` (a step graph CUDA refused) fails it.
ab_row() {
  local name=$1 what=$2 base=() v args speed speeds=() ok=1 time=0 why=""
  shift 2
  while [ "$1" != -- ]; do base+=("$1"); shift; done
  local flag=$2 a=$3 b=$4
  for v in "$a" "$b"; do
    args=(bench --devices "$dev" --modes dp --precision bf16 "$flag" "$v" --wide "${base[@]}")
    run "$work/log" 120 20 "$fanout" "${args[@]}"
    append bench.txt "fanout ${args[*]} (${secs}s, exit $rc)" "$work/log"
    time=$(awk -v a="$time" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    speed=$(grep -oE 'bf16 best: dp, [0-9]+ tokens/s' "$work/log" | grep -oE '[0-9]+ tokens' | cut -d' ' -f1)
    if [ "$rc" -ne 0 ]; then
      ok=0 why+="$v: $(failure "$rc"); "
    elif [ -z "$speed" ]; then
      ok=0 why+="$v: no tokens/s line; "
    elif grep -q 'could not be recorded' "$work/log"; then
      ok=0 why+="$v: $(grep -m1 'could not be recorded' "$work/log" | cut -c1-300); "
    fi
    speeds+=("${speed:-none}")
  done
  local figure="bf16, one $dev, $what: $a ${speeds[0]} tokens/s, $b ${speeds[1]} tokens/s"
  if [ "$ok" = 1 ]; then
    figure+=" ($(awk -v a="${speeds[1]}" -v b="${speeds[0]}" 'BEGIN { printf "%.3fx", a / b }'))"
    row 4 "$name" passed "$figure" "$time"
  else
    row 4 "$name" failed "$why$figure" "$time"
  fi
}

# The seed preset at 16 x 512 on a GPU, the tiny one briefly under --cpu.
seed_args() {
  if [ "$cpu" = 0 ]; then
    echo --preset seed --batch-size 16 --seq-len 512
  else
    echo --preset tiny --steps 2 --warmup 1
  fi
}

# Note [Fused projections]: the five projection GEMMs against q/k/v and gate/up
# fused; the figure says whether fusing pays on this card.
step_projections() {
  if [ "$quick" = 1 ]; then
    row 4 "projections: separate vs fused" skipped "left out by --quick" 0
    return
  fi
  # shellcheck disable=SC2046
  ab_row "projections: separate vs fused" "$(seed_args | cut -d' ' -f2)" $(seed_args) \
    -- --projections separate fused
}

# Note [Step graphs]: each step replayed as one CUDA graph against launched op by
# op, where launches weigh most (the tiny preset) and at the seed preset's size.
step_graphs() {
  if [ "$quick" = 1 ]; then
    row 4 "graphs: off vs on" skipped "left out by --quick" 0
    return
  fi
  ab_row "graphs: off vs on (tiny)" "tiny 16 x 128" --preset tiny --steps 20 --warmup 2 \
    -- --graphs off on
  # shellcheck disable=SC2046
  ab_row "graphs: off vs on (seed)" "$(seed_args | cut -d' ' -f2)" $(seed_args) \
    -- --graphs off on
}

# Note [Timed GEMM algorithms] (ops/cuda/gemm_cublas.cu): cuBLASLt's first answer
# for each GEMM shape against the fastest of its best few, timed in the warm-up.
step_gemm_algo() {
  if [ "$cpu" = 1 ] || [ "$quick" = 1 ]; then
    local why="left out by --quick"
    [ "$cpu" = 0 ] || why="GPU only (--cpu)"
    row 4 "GEMM algorithms: heuristic vs timed" skipped "$why" 0
    return
  fi
  # shellcheck disable=SC2046
  ab_row "GEMM algorithms: heuristic vs timed" "$(seed_args | cut -d' ' -f2)" $(seed_args) \
    -- --gemm-algo heuristic timed
}

# --- 5. compute-sanitizer -----------------------------------------------------------

step_sanitizer() {
  local tool cs summary total passed failed
  echo "# compute-sanitizer on the op tests (tests/ops/test_*_cuda.cpp)" >"$out/sanitizer.txt"
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    if [ "$cpu" = 1 ]; then
      row 5 "compute-sanitizer --tool $tool" skipped "GPU only (--cpu)" 0
      continue
    fi
    if [ ! -x "$cs" ]; then
      row 5 "compute-sanitizer --tool $tool" failed "compute-sanitizer not found" 0
      continue
    fi
    # Needs a minute at least; 99: the sanitizer found something, 1: a test failed.
    run "$work/log" 240 60 "$cs" --tool "$tool" --error-exitcode 99 "$gpu_tests" \
      --source-file='*/ops/test_*_cuda.cpp'
    summary=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$work/log" | sed 's/^=* *//')
    read -r total passed failed <<<"$(doctest_counts "$work/log")"
    # racecheck reports hazards inside NVIDIA's own cuBLAS and cuDNN kernels too (wgmma
    # and TMA code it does not model); only fanout's kernels are ours to fix.
    if [ "$tool" = racecheck ]; then
      local races ours
      races=$(grep -c 'Race reported' "$work/log")
      ours=$(grep 'Race reported' "$work/log" | grep -c 'fanout::')
      summary+="; $ours in fanout's kernels, $((races - ours)) inside cuBLAS/cuDNN's"
      [ "$rc" -ne 99 ] || [ "$ours" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$total" -eq 0 ] || rc=0
    fi
    check_row 5 "compute-sanitizer --tool $tool" sanitizer.txt "$tool" \
      "${summary:-no sanitizer summary}; $passed/$total test cases passed"
  done
}

# --- the check --------------------------------------------------------------------

torch_ok=0  # set by step_environment when FANOUT_PYTHON (or python3) imports torch
step_environment
step_suite
step_e2e
step_bench
step_projections
step_graphs
step_gemm_algo
step_sanitizer
write_summary
cat "$out/summary.md"

# Everything ran and passed; under --cpu, skipped (GPU-only) rows are no failure.
for status in "${rows_status[@]}"; do
  case "$status" in
    passed) ;;
    skipped) [ "$cpu" = 1 ] || exit 1 ;;
    *) exit 1 ;;
  esac
done
exit 0
