#!/usr/bin/env bash
# The bundle that lets the GPU machine run prebuilt fanout and fanout_gpu_tests
# (docs/gpu.md, "Making the bundle"): a Release sm_90 build made here, the Debian
# runtime libraries the GPU machine lacks, the reference scripts, env.sh.
#
#   tools/gpu/bundle.sh [DIR]                      build, then fill DIR (default .gpu-bundle)
#   tools/gpu/bundle.sh --verify [DIR]             ldd the binaries as the GPU machine would
#   tools/gpu/bundle.sh --libs-only DIR BINARY...  only collect BINARY's libraries into DIR/lib
#
# FANOUT_BUNDLE_BUILD=DIR reuses a CUDA Release build (e.g. build) instead of build-gpu.
# Building from source on the GPU machine instead (about 2 of its 15 minutes) would
# need the Debian -dev packages: shared/gpu/pack-debs.sh (beside the repository)
# carries those (about 22 MB) with unpack-debs.sh. Prebuilt binaries need only the
# runtime libraries, so the bundle leaves them out.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
kLimitMiB=60
# The CUDA toolkit's libraries, here and on the GPU machine (here lib64 is lib).
kCudaDirs=(/usr/local/cuda/lib64 /usr/local/cuda/lib)
# Libraries loaded with dlopen, which ldd cannot see, copied beside the one that loads them.
kDlopened=("libtbb.so.12:libtbbmalloc.so.2")

die() {
  echo "bundle: error: $*" >&2
  exit 1
}

usage() {
  sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# --- which libraries travel -----------------------------------------------------

# glibc, libstdc++ and libgcc_s: the GPU machine's own are newer; never bundled.
is_base() {
  case "$1" in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libmvec.so.* | \
      libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | \
      libanl.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
  esac
  return 1
}

# The CUDA libraries: the GPU machine's toolkit or pip's nvidia-* wheels have them.
is_cuda() {
  [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn[a-z_]*|nvrtc[a-z_-]*|nvJitLink|nvblas|cufftw?|curand|cusolver(Mg)?|cusparse|cupti|nvToolsExt|nvidia-[a-z-]+)\.so ]]
}

# The DT_NEEDED names of an ELF file, one a line.
needed() {
  readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}

# collect_libs LIBDIR BINARY...: walks the DT_NEEDED graph from the binaries,
# resolving each name where ldd resolves it on this machine, and copies every
# library that is neither base nor CUDA into LIBDIR as a real file under its
# SONAME (Debian's OpenBLAS is an alternatives symlink into openblas-pthread/).
collect_libs() {
  local libdir=$1 bin name path extra loader loaded
  shift
  mkdir -p "$libdir"
  local -A where=() seen=()
  local queue=()
  for bin in "$@"; do
    [ -f "$bin" ] || die "no binary at $bin"
    while read -r name path; do
      where[$name]=$path
    done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
    mapfile -t -O "${#queue[@]}" queue < <(needed "$bin")
  done
  while [ ${#queue[@]} -gt 0 ]; do
    name=${queue[0]}
    queue=("${queue[@]:1}")
    [ -z "${seen[$name]:-}" ] || continue
    seen[$name]=1
    if is_base "$name" || is_cuda "$name"; then continue; fi
    path=${where[$name]:-}
    [ -n "$path" ] || die "$name: not found by ldd on this machine"
    cp -L "$(readlink -f "$path")" "$libdir/$name"
    chmod 644 "$libdir/$name"
    mapfile -t -O "${#queue[@]}" queue < <(needed "$path")
    for extra in "${kDlopened[@]}"; do
      loader=${extra%%:*} loaded=${extra#*:}
      if [ "$name" = "$loader" ] && [ -f "$(dirname "$path")/$loaded" ]; then
        where[$loaded]=$(dirname "$path")/$loaded
        queue+=("$loaded")
      fi
    done
  done
}

# --- verify -----------------------------------------------------------------------

# verify_bundle DIR: every binary in DIR/bin through the loader with only the
# bundle's libraries and the CUDA folders on the library path and no ld.so.cache.
# The loader still searches /lib and /usr/lib, so each library it finds must lie
# in the bundle, be a CUDA library in a CUDA folder, or belong to the base system.
verify_bundle() {
  local dir=$1 libdir bin name path bad=0 n_bundle n_cuda n_base tmp=""
  libdir=$dir/lib
  if [ -f "$dir/lib.tar.xz" ]; then  # packed: unpack a copy, leaving the bundle as it is
    tmp=$(mktemp -d)
    tar -xJf "$dir/lib.tar.xz" -C "$tmp"
    libdir=$tmp
  fi
  local search=$libdir
  for path in "${kCudaDirs[@]}"; do search+=":$path"; done
  local bins=("$dir"/bin/*)
  [ -f "${bins[0]}" ] || die "no binaries in $dir/bin"
  echo "verify: env -i ld.so --inhibit-cache --library-path $search --list (BUNDLE/lib = $libdir)"
  for bin in "${bins[@]}"; do
    n_bundle=0 n_cuda=0 n_base=0
    echo "== $(basename "$bin")"
    while read -r name path; do
      local why=""
      if [ "$path" = "not" ]; then
        if is_cuda "$name"; then
          why="not found here (the GPU machine provides it)"
        else
          why="NOT FOUND"
          bad=1
        fi
      elif [[ "$path" == "$libdir/"* ]]; then
        n_bundle=$((n_bundle + 1))
      elif is_cuda "$name" && [[ "$path" == /usr/local/cuda* ]]; then
        n_cuda=$((n_cuda + 1))
      elif is_base "$name"; then
        n_base=$((n_base + 1))
      else
        why="OUTSIDE THE BUNDLE"
        bad=1
      fi
      printf '  %-34s %s%s\n' "$name" "${path/#$libdir/BUNDLE\/lib}" "${why:+  <- $why}"
    done < <(env -i /lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path "$search" \
      --list "$bin" | awk '$2 == "=>" {print $1, $3} $2 != "=>" && $1 ~ /^\// {n = split($1, p, "/"); print p[n], $1}')
    echo "  ($n_bundle from the bundle, $n_cuda CUDA, $n_base base system)"
  done
  [ -z "$tmp" ] || rm -rf "$tmp"
  if [ "$bad" = 1 ]; then
    echo "verify: FAILED: a library above would be missing on the GPU machine"
    return 1
  fi
  echo "verify: OK"
}

# --- the bundle -------------------------------------------------------------------

# The nvcc that BUILD was configured with; empty without the CUDA backend.
cuda_compiler() {
  sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' "$1"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -n1
}

# The Release sm_90 build: configured here (build-gpu) or reused (FANOUT_BUNDLE_BUILD).
build_binaries() {
  local build=$1
  if [ -n "${FANOUT_BUNDLE_BUILD:-}" ] && [ -f "$build/CMakeCache.txt" ]; then
    grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$build/CMakeCache.txt" ||
      die "$build is not a Release build"
    [ -n "$(cuda_compiler "$build")" ] || die "$build has no CUDA backend"
  else
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFANOUT_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  fi
  cmake --build "$build" --target fanout fanout_gpu_tests
}

# check_gpu_code BINARY: sm_90 SASS and compute_90 PTX are both in (cuobjdump when
# the toolkit has it, else tools/gpu/fatbin_list.py); prints one line for MANIFEST.
check_gpu_code() {
  local bin=$1 list
  if command -v cuobjdump >/dev/null; then
    list=$(cuobjdump --list-elf "$bin" | grep -o 'sm_[0-9a-z]*' | sed 's/^/elf /' || true
      cuobjdump --list-ptx "$bin" | grep -o 'sm_[0-9a-z]*' | sed 's/^sm_/ptx compute_/' || true)
    list=$(sort <<<"$list" | uniq -c | awk '{print $2, $3, $1}')
  else
    list=$(python3 "$here/fatbin_list.py" "$bin")
  fi
  grep -q '^elf sm_90 ' <<<"$list" || die "$bin has no sm_90 SASS: $list"
  grep -q '^ptx compute_90 ' <<<"$list" || die "$bin has no compute_90 PTX: $list"
  echo "$(basename "$bin"): $(paste -sd, <<<"$list" | sed 's/,/, /g')"
}

# write_env_sh FILE: what the GPU machine sources (bash); DIR is wherever it lies.
write_env_sh() {
  cat >"$1" <<'EOF'
# fanout bundle: source on the GPU machine (bash): `source DIR/env.sh`.
# LD_LIBRARY_PATH: the bundle's lib/ first, then /usr/local/cuda/lib64 (the toolkit the
# binaries were built against: its libcudart and cuBLAS win over a wheel's), then pip's
# nvidia-* wheels (NCCL, cuDNN: the GPU machine has them only there); never stubs/. Never sets CPATH: a wheel's CUDA
# headers would shadow the toolkit's.
fanout_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fanout_lib=$fanout_bundle/lib
# Packed libraries: unpacked into lib/ once (into /tmp where the bundle is read-only);
# the stamp names the tarball, so a new bundle in the same place unpacks again.
if [ -f "$fanout_bundle/lib.tar.xz" ]; then
  fanout_stamp=$(stat -c '%s %Y' "$fanout_bundle/lib.tar.xz")
  if ! mkdir -p "$fanout_lib" 2>/dev/null || [ ! -w "$fanout_lib" ]; then
    fanout_lib=/tmp/fanout-bundle-lib.$(printf '%s' "$fanout_bundle" | cksum | cut -d' ' -f1)
    mkdir -p "$fanout_lib"
  fi
  if [ "$(cat "$fanout_lib/.unpacked" 2>/dev/null)" != "$fanout_stamp" ]; then
    # Into a folder beside it, then renamed in: a reader never sees half a library.
    if fanout_tmp=$(mktemp -d "$fanout_lib.XXXXXX") &&
      tar -xJf "$fanout_bundle/lib.tar.xz" -C "$fanout_tmp" && mv -f "$fanout_tmp"/* "$fanout_lib/"; then
      echo "$fanout_stamp" >"$fanout_lib/.unpacked"
    else
      echo "env.sh: could not unpack $fanout_bundle/lib.tar.xz into $fanout_lib" >&2
    fi
    rm -rf "${fanout_tmp:-/nonexistent}"
  fi
  unset fanout_stamp fanout_tmp
fi
# The python with torch: python3 on PATH when it imports torch, else Debian's.
if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then
  FANOUT_PYTHON=$(command -v python3)
else
  FANOUT_PYTHON=/usr/bin/python3
fi
fanout_path=$fanout_lib
fanout_site=$("$FANOUT_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
for fanout_dir in /usr/local/cuda/lib64 "$fanout_site"/nvidia/*/lib; do
  [ ! -d "$fanout_dir" ] || fanout_path+=":$fanout_dir"
done
# What was there before, less the stubs and duplicates.
fanout_old=${LD_LIBRARY_PATH:-}
while [ -n "$fanout_old" ]; do
  fanout_dir=${fanout_old%%:*}
  [ "$fanout_dir" = "$fanout_old" ] && fanout_old="" || fanout_old=${fanout_old#*:}
  case "$fanout_dir" in "" | */stubs | */stubs/) continue ;; esac
  case ":$fanout_path:" in *":$fanout_dir:"*) ;; *) fanout_path+=":$fanout_dir" ;; esac
done
export LD_LIBRARY_PATH=$fanout_path
export FANOUT_REFERENCE_DIR=$fanout_bundle/reference
export FANOUT_BINARY=$fanout_bundle/bin/fanout
export FANOUT_PYTHON
unset fanout_bundle fanout_lib fanout_path fanout_site fanout_dir fanout_old
EOF
}

# The newest glibc and libstdc++ symbol versions that FILES require: the GPU
# machine's own libc and libstdc++ must have them.
needs_versions() {
  objdump -T "$@" 2>/dev/null | grep 'UND' | grep -o '\(GLIBC\|GLIBCXX\|CXXABI\)_[0-9.]*' |
    sort -uV | awk -F_ '{v[$1] = $0} END {for (k in v) print v[k]}' | sort | paste -sd' ' -
}

# write_manifest DIR BUILD GPU_CODE NEEDS
write_manifest() {
  local dir=$1 build=$2 gpu_code=$3 needs=$4 commit
  commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
  [ -z "$(git -C "$root" status --porcelain 2>/dev/null)" ] || commit+="+dirty"
  {
    echo "commit: $commit"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "build type: $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")"
    # CMakeLists.txt's default (90) is no cache entry; the nvcc flags say it in full.
    echo "CUDA architectures: $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" |
      grep . || echo "90 (the default)") ($(grep -o 'generate-code=[^ ]*' "$build/build.ninja" | sort -u | paste -sd' ' -))"
    echo "GPU code: $gpu_code" | paste -sd';' - | sed 's/;/; /g'
    echo "nvcc: $("$(cuda_compiler "$build")" --version | tail -n2 | paste -sd' ' -)"
    echo "needs from the GPU machine's libc and libstdc++: $needs"
    echo "files (bytes, path):"
    (cd "$dir" && find . -type f ! -name MANIFEST.txt -printf '%s %P\n' | sort -k2)
  } >"$dir/MANIFEST.txt"
}

# The bytes in DIR's files.
bytes() {
  find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'
}

make_bundle() {
  local dir=$1 build bin gpu_code="" needs total
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    die "nvcc not found: the bundle is built here with the CUDA toolkit (/usr/local/cuda)"
  # Never empty a folder that is not an earlier bundle (checked before building).
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/MANIFEST.txt" ]; then
    die "$dir is neither empty nor a bundle (no MANIFEST.txt): not replacing it"
  fi
  build=${FANOUT_BUNDLE_BUILD:-build-gpu}
  [[ "$build" == /* ]] || build=$root/$build
  build_binaries "$build"
  local bins=("$build/apps/fanout/fanout" "$build/tests/fanout_gpu_tests")
  for bin in "${bins[@]}"; do
    gpu_code+="$(check_gpu_code "$bin")"$'\n'
  done

  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/reference"
  for bin in "${bins[@]}"; do
    cp "$bin" "$dir/bin/"
    # Release has no debug info; a reused RelWithDebInfo build would (tens of MB).
    if readelf -S "$dir/bin/$(basename "$bin")" | grep -q '\.debug_info'; then
      strip --strip-debug "$dir/bin/$(basename "$bin")"
    fi
  done
  collect_libs "$dir/lib" "${bins[@]}"
  cp "$root"/tests/reference/*.py "$dir/reference/"
  find "$root/tests" -name 'test_*_cuda.cpp' -printf '%f\n' | sort >"$dir/gpu_tests.txt"
  write_env_sh "$dir/env.sh"
  if [ -f "$here/check.sh" ]; then
    cp "$here/check.sh" "$dir/check.sh"
  else
    echo "bundle: warning: no tools/gpu/check.sh yet; the bundle has no check.sh" >&2
  fi

  needs=$(needs_versions "$dir"/bin/* "$dir"/lib/* || true)
  # Over the limit: the libraries travel as lib.tar.xz (env.sh unpacks it).
  total=$(bytes "$dir")
  if [ "$total" -gt $((kLimitMiB * 1024 * 1024)) ]; then
    echo "bundle: $((total / 1024 / 1024)) MiB uncompressed: packing lib/ into lib.tar.xz"
    tar -C "$dir/lib" -cf - . | xz -T0 >"$dir/lib.tar.xz"
    rm -rf "${dir:?}/lib"
  fi
  write_manifest "$dir" "$build" "${gpu_code%$'\n'}" "$needs"
  total=$(bytes "$dir")
  echo "bundle: $dir: $(awk -v b="$total" 'BEGIN {printf "%.1f", b / 1048576}') MiB in $(find "$dir" -type f | wc -l) files"
  [ "$total" -le $((kLimitMiB * 1024 * 1024)) ] || die "over ${kLimitMiB} MiB"
}

# --- main -------------------------------------------------------------------------

# An absolute path for DIR (default .gpu-bundle at the repository root).
bundle_dir() {
  local dir=${1:-$root/.gpu-bundle}
  [[ "$dir" == /* ]] || dir=$PWD/$dir
  echo "$dir"
}

case "${1:-}" in
  -h | --help) usage ;;
  --verify)
    [ $# -le 2 ] || die "--verify takes one DIR"
    verify_bundle "$(bundle_dir "${2:-}")"
    ;;
  --libs-only)
    [ $# -ge 3 ] || die "usage: bundle.sh --libs-only DIR BINARY..."
    dir=$(bundle_dir "$2")
    shift 2
    collect_libs "$dir/lib" "$@"
    ls "$dir/lib"
    ;;
  -*) die "unknown option $1 (see --help)" ;;
  *)
    [ $# -le 1 ] || die "one DIR only (see --help)"
    make_bundle "$(bundle_dir "${1:-}")"
    ;;
esac
