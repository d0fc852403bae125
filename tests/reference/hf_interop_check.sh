#!/usr/bin/env bash
# ctest reference.hf_interop: tests/reference/hf_interop.py's plumbing with
# llama_ref.py standing in for transformers (not installed here; the GPU check
# runs the real library): a fanout checkpoint and a saved reference model both
# ways on cpu:0 agree, and bf16 logits (about 1e-2 off) are caught as a mismatch.
set -euo pipefail
fanout=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$fanout" train --steps 3 --batch-size 2 --seq-len 16 --devices cpu:0 --out "$dir/run" >/dev/null
/usr/bin/python3 "$here/hf_interop.py" --fanout "$fanout" --checkpoint "$dir/run/final" --impl ref
set +e
/usr/bin/python3 "$here/hf_interop.py" --fanout "$fanout" --checkpoint "$dir/run/final" --impl ref \
  --precision bf16 >"$dir/bf16.log" 2>&1
rc=$?
set -e
cat "$dir/bf16.log"
[ "$rc" -eq 1 ] || { echo "bf16 logits were not caught as a mismatch (exit $rc)"; exit 1; }
grep -q '^fanout-to-hf: MISMATCH' "$dir/bf16.log"
echo "hf_interop_check: ok"
