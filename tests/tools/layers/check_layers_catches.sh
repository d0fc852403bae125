#!/usr/bin/env bash
# tools/check_layers.sh must refuse each include that runs up a layer: for every
# rule, a copy of the source tree gets one bad include and the check must exit
# 1 naming that file; the untouched copy must pass.
set -euo pipefail
src="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
copy="$work/tree"
mkdir -p "$copy"
(cd "$src" && tar cf - engine ops models apps tools) | (cd "$copy" && tar xf -)
"$copy/tools/check_layers.sh" "$copy" > /dev/null || { echo "FAIL: the clean tree fails"; exit 1; }
fails=0
# folder of the offending file | the include it gets
while IFS='|' read -r file inc; do
  cp "$copy/$file" "$work/saved"
  printf '#include "%s"\n' "$inc" >> "$copy/$file"
  if out="$("$copy/tools/check_layers.sh" "$copy" 2>&1)"; then
    echo "FAIL: $file including $inc passed"
    fails=1
  elif ! grep -q "^$file:[0-9]*: .* must not include $inc" <<< "$out"; then
    echo "FAIL: $file including $inc: the message does not name it: $out"
    fails=1
  fi
  cp "$work/saved" "$copy/$file"
done <<'CASES'
engine/distributed/process_group.h|engine/parallel/data_parallel.h
engine/distributed/rendezvous.cpp|engine/comm/communicator.h
engine/comm/communicator.cpp|engine/parallel/collectives/collectives.h
engine/parallel/data_parallel.cpp|models/llama_model.h
engine/parallel/zero/sharded_storage.cpp|ops/adamw.h
engine/parallel/replica.h|engine/comm/communicator.h
engine/core/tensor.h|engine/parallel/replica.h
engine/core/flat.cpp|engine/distributed/process_group.h
engine/core/trace.cpp|apps/train/training.h
ops/matmul.cpp|models/llama_model.h
apps/presentation/svg_chart.cpp|apps/bench/bench.h
apps/train/trainer.cpp|apps/presentation/text_table.h
CASES
[ "$fails" = 0 ] && echo "check_layers catches every bad include tried"
exit "$fails"
