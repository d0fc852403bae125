#!/usr/bin/env bash
# The examples' command lines: --help and -h print a usage and exit 0 without
# running anything; a bad argument is one line on stderr and exit code 2; the
# member count goes through fanout's number rules ("010" is ten, " 3" and "0x3" are
# refused). The runs themselves are checked by check_collectives_example*.
#   bash check_example_args.sh <fanout_dp_example> <fanout_collectives_example>
set -u
dp=$1
coll=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
failed=0

fail() {
  echo "FAIL: $1" >&2
  echo "--- stdout:" >&2
  cat "$dir/out" >&2
  echo "--- stderr:" >&2
  cat "$dir/err" >&2
  failed=1
}

# run [ENV=...] BINARY ARGS...: exit code in $rc, output in $dir/out and $dir/err.
run() {
  timeout 60 env "$@" >"$dir/out" 2>"$dir/err" </dev/null
  rc=$?
}

# The usage: exit 0, "usage:" on stdout, nothing on stderr, and quickly (no run).
for bin in "$dp" "$coll"; do
  for flag in --help -h; do
    start=$SECONDS
    run "$bin" "$flag"
    what="$(basename "$bin") $flag"
    [ "$rc" -eq 0 ] || fail "$what exited with $rc"
    grep -q '^usage: ' "$dir/out" || fail "$what printed no usage"
    [ ! -s "$dir/err" ] || fail "$what wrote to stderr"
    [ $((SECONDS - start)) -lt 5 ] || fail "$what ran the example instead of printing its usage"
  done
done

# usage_refused WHAT PHRASE ARGS...: exit 2, one line on stderr holding PHRASE, no stdout.
usage_refused() {
  local what=$1 phrase=$2
  shift 2
  run "$@"
  [ "$rc" -eq 2 ] || fail "$what: exit code $rc, expected 2"
  [ "$(grep -c . "$dir/err")" -eq 1 ] || fail "$what: expected one line on stderr"
  grep -qF -- "$phrase" "$dir/err" || fail "$what: stderr lacks '$phrase'"
  [ ! -s "$dir/out" ] || fail "$what: wrote to stdout"
}

usage_refused "dp example with an argument" "unexpected argument '3'" "$dp" 3
usage_refused "dp example with a flag" "unexpected argument '--steps'" "$dp" --steps
usage_refused "--members" "unknown flag --members" "$coll" --members
usage_refused "0x3" "MEMBERS: '0x3' is not a whole number" "$coll" 0x3
usage_refused "' 3'" "MEMBERS: ' 3' is not a whole number" "$coll" " 3"
usage_refused "3abc" "MEMBERS: '3abc' is not a whole number" "$coll" 3abc
usage_refused "''" "MEMBERS: an empty value" "$coll" ""
usage_refused "0" "MEMBERS: '0' is out of range" "$coll" 0
usage_refused "65" "MEMBERS: '65' is out of range" "$coll" 65
usage_refused "-2" "MEMBERS: '-2'" "$coll" -2
usage_refused "two arguments" "one argument at most (MEMBERS), got 2" "$coll" 2 3
usage_refused "MEMBERS under RANK" "RANK is set" RANK=0 "$coll" 2

# A leading zero is decimal, never octal: 010 is ten members.
run "$coll" 010
[ "$rc" -eq 0 ] || fail "010 members: exit code $rc"
grep -q '^10 members in this process' "$dir/out" || fail "010 is not ten members"

exit $failed
