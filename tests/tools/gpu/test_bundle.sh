#!/usr/bin/env bash
# tools/gpu/bundle.sh's library walk and its ldd check, on the fanout binary of
# this build (no second build): --libs-only puts oneTBB, oneDNN and OpenBLAS into
# DIR/lib as real files under their SONAMEs and no base-system or CUDA library;
# --verify passes on that, and fails once a library is taken out again (the
# loader would find this machine's copy, which the GPU machine lacks).
# usage: test_bundle.sh FANOUT_BINARY
set -euo pipefail
fanout=$1
bundle=$(cd "$(dirname "$0")/../../.." && pwd)/tools/gpu/bundle.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

"$bundle" --libs-only "$dir" "$fanout" >/dev/null
for want in libtbb.so.12 libdnnl.so.2 libopenblas.so.0 libgfortran.so.5; do
  if [ ! -f "$dir/lib/$want" ] || [ -L "$dir/lib/$want" ]; then
    fail "$want is not a file in DIR/lib"
  fi
done
for f in "$dir"/lib/*; do
  name=$(basename "$f")
  case "$name" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | \
      libstdc++.so.* | libgcc_s.so.* | libcudart* | libcublas* | libnccl* | libcudnn* | libcuda.so*)
      fail "$name was bundled" ;;
  esac
  soname=$(readelf -d "$f" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')
  [ "$soname" = "$name" ] || fail "$name has SONAME '$soname'"
done

mkdir "$dir/bin"
ln -s "$(readlink -f "$fanout")" "$dir/bin/fanout"
"$bundle" --verify "$dir" >"$dir/verify.log" || fail "--verify failed: $(cat "$dir/verify.log")"
rm "$dir/lib/libtbb.so.12"
if "$bundle" --verify "$dir" >"$dir/verify.log"; then
  fail "--verify passed without libtbb.so.12 in the bundle"
elif ! grep -q 'libtbb.so.12 .*OUTSIDE THE BUNDLE' "$dir/verify.log"; then
  fail "--verify did not name libtbb.so.12: $(cat "$dir/verify.log")"
fi

echo "test_bundle: $failures failure(s)"
[ "$failures" -eq 0 ]
