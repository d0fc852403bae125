#!/usr/bin/env bash
# Runs the collectives example as 2 processes on 127.0.0.1 (RANK, WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT set, as torchrun sets them: the example's process mode)
# and checks that both exit 0 and print, line for line, the values computed by hand.
# check_collectives_example.cmake checks the in-process mode with 3 members.
#   bash check_collectives_example_processes.sh <fanout_collectives_example>
set -u
example=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# A port that another job may take first: rank 0 then fails to bind, and we try another.
for attempt in 1 2 3; do
  port=$((20000 + RANDOM))
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 30 "$example" >"$dir/out0" 2>"$dir/err0" &
  pid0=$!
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 30 "$example" >"$dir/out1" 2>"$dir/err1" &
  pid1=$!
  wait "$pid0"
  rc0=$?
  if [ "$rc0" -ne 0 ] && grep -q "already in use" "$dir/err0"; then
    kill "$pid1" 2>/dev/null  # timeout passes the signal on to the example
    wait "$pid1"
    continue
  fi
  [ "$rc0" -eq 0 ] || kill "$pid1" 2>/dev/null  # rank 1 cannot finish without rank 0
  wait "$pid1"
  rc1=$?
  break
done

fail() {
  echo "FAIL: $1" >&2
  for r in 0 1; do
    echo "--- rank $r stdout:" >&2
    cat "$dir/out$r" >&2
    echo "--- rank $r stderr:" >&2
    cat "$dir/err$r" >&2
  done
  exit 1
}
[ "${rc1+set}" = set ] || fail "rank 0 found no free port in 3 tries"
[ "$rc0" -eq 0 ] || fail "rank 0 exited with $rc0 (124: it ran past 30 s)"
[ "$rc1" -eq 0 ] || fail "rank 1 exited with $rc1 (124: it ran past 30 s)"

# Rank r holds x = r + 1; reductions in rank order (i32 avg toward zero: 3 / 2 = 1;
# bf16 0.100098 + 0.200195 rounds once to 0.300781, 256 + 258 ties to even 512).
cat >"$dir/want0" <<'EOF'
2 processes, backend gloo
[rank 0] broadcast from 0:        [3.5, -1, 7] -> [3.5, -1, 7]
[rank 0] all_reduce i32 sum:      [1, -1, 10] -> [3, -3, 30]
[rank 0] all_reduce i32 avg:      [1, -1, 10] -> [1, -1, 15]
[rank 0] all_reduce i32 max:      [1, -1, 10] -> [2, -1, 20]
[rank 0] all_reduce i32 min:      [1, -1, 10] -> [1, -2, 10]
[rank 0] all_reduce bf16 sum:     [0.100098, 256] -> [0.300781, 512]
[rank 0] reduce sum to 1:         [1, 1] -> [1, 1]
[rank 0] all_gather (uneven):     [1] -> [1, 2, 2]
[rank 0] gather to 0:             -> [1, -1, 2, -2]
[rank 0] scatter from 0:          -> [0, 10]
[rank 0] reduce_scatter sum:      [0, 1, 2, 3] -> [0, 3]
[rank 0] all_to_all:              [0, 1] -> [0, 10]
[rank 0] broadcast_object from 0: "lr=3e-4 steps=1000"
[rank 0] barrier:                 every member arrived
EOF
cat >"$dir/want1" <<'EOF'
[rank 1] broadcast from 0:        [0, 0, 0] -> [3.5, -1, 7]
[rank 1] all_reduce i32 sum:      [2, -2, 20] -> [3, -3, 30]
[rank 1] all_reduce i32 avg:      [2, -2, 20] -> [1, -1, 15]
[rank 1] all_reduce i32 max:      [2, -2, 20] -> [2, -1, 20]
[rank 1] all_reduce i32 min:      [2, -2, 20] -> [1, -2, 10]
[rank 1] all_reduce bf16 sum:     [0.200195, 258] -> [0.300781, 512]
[rank 1] reduce sum to 1:         [2, 4] -> [3, 5]
[rank 1] all_gather (uneven):     [2, 2] -> [1, 2, 2]
[rank 1] gather to 0:             sent [2, -2]
[rank 1] scatter from 0:          -> [20, 30]
[rank 1] reduce_scatter sum:      [0, 2, 4, 6] -> [6, 9]
[rank 1] all_to_all:              [10, 11] -> [1, 11]
[rank 1] broadcast_object from 0: "lr=3e-4 steps=1000"
[rank 1] barrier:                 every member arrived
EOF
for r in 0 1; do
  diff -u "$dir/want$r" "$dir/out$r" >&2 || fail "rank $r printed other lines than expected (diff above)"
done
echo "both ranks exited 0 and printed the expected lines"
