#!/usr/bin/env bash
# The include rules of the house (docs/architecture.md): each folder includes
# only itself and the folders listed for it, so no include runs up a layer.
#   engine/core         nothing above it
#   engine/distributed  core only: nothing of parallel/ or comm/
#   engine/comm         core and distributed: nothing of parallel/
#   engine/parallel     core and distributed: no models/, no ops/
#   ops, models, apps/  the layers under them (the table below)
# Prints each include that breaks a rule (file:line) and exits 1; exits 0 when
# every rule holds. Usage: tools/check_layers.sh [source root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

# folder -> the folders its files may include besides its own
declare -A allowed=(
  [engine/core]=""
  [engine/distributed]="engine/core"
  [engine/comm]="engine/core engine/distributed"
  [engine/parallel]="engine/core engine/distributed"
  [ops]="engine/core"
  [models]="engine/core engine/parallel ops"
  [apps/data]="engine/core"
  [apps/train]="engine/core engine/distributed engine/parallel ops models apps/data"
  [apps/presentation]="engine/core engine/parallel ops models apps/data apps/train"
  [apps/bench]="engine/core engine/distributed engine/parallel ops models apps/data apps/train apps/presentation"
  [apps/walkthrough]="engine/core engine/distributed engine/parallel ops models apps/data apps/train apps/presentation"
  [apps/fanout]="engine/core engine/distributed engine/parallel ops models apps/data apps/train apps/presentation apps/bench apps/walkthrough"
  [apps/examples]="engine/core engine/distributed engine/comm engine/parallel ops models apps/data apps/train"
)

rules=""
for dir in "${!allowed[@]}"; do
  [ -d "$dir" ] || { echo "check_layers: $dir is missing" >&2; exit 1; }
  rules+="$dir=${allowed[$dir]};"
done
bad=0
# One grep over every folder (file:line:#include "x/y.h"), one awk over its lines.
out="$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "${!allowed[@]}" \
         --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.inc' |
       awk -v rules="$rules" '
  BEGIN {
    n = split(rules, rs, ";")
    for (i = 1; i <= n; i++) {
      if (rs[i] == "") continue
      split(rs[i], kv, "=")
      m = split(kv[2], al, " ")
      for (j = 1; j <= m; j++) ok[kv[1] SUBSEP al[j]] = 1
    }
  }
  # The folder of a path: engine/x and apps/x are two levels, ops and models one.
  function folder(p,   parts, k) {
    k = split(p, parts, "/")
    if ((parts[1] == "engine" || parts[1] == "apps") && k >= 3) return parts[1] "/" parts[2]
    if ((parts[1] == "ops" || parts[1] == "models") && k >= 2) return parts[1]
    return ""
  }
  {
    file = $0; sub(/:.*/, "", file)
    rest = substr($0, length(file) + 2)
    line = rest; sub(/:.*/, "", line)
    inc = rest; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    from = folder(file); to = folder(inc)
    if (from == "" || to == "") next
    checked++
    if (to == from || ((from SUBSEP to) in ok)) next
    printf "%s:%s: %s must not include %s (%s is not below it)\n", file, line, from, inc, to
    broken++
  }
  END { printf "checked %d\n", checked; exit broken > 0 }')" || bad=1
checked="$(printf '%s\n' "$out" | sed -n 's/^checked //p')"
printf '%s\n' "$out" | grep -v '^checked ' || true
# Every folder with sources has a rule.
for d in engine/* apps/*; do
  [ -d "$d" ] || continue
  if [ -z "${allowed[$d]+x}" ] && find "$d" -name '*.cpp' -o -name '*.h' | grep -q .; then
    echo "check_layers: $d has sources but no rule in tools/check_layers.sh"
    bad=1
  fi
done
if [ "$bad" = 0 ]; then
  echo "check_layers: ok ($checked project includes in ${#allowed[@]} folders follow the layers)"
fi
exit "$bad"
