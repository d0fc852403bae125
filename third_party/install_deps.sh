#!/usr/bin/env bash
# Installs the Debian packages fanout builds and tests with. Idempotent and quick
# when everything is already present: apt-get runs only for missing packages.
# Usage: third_party/install_deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libtbb-dev doctest-dev libopenblas-dev libdnnl-dev nlohmann-json3-dev libcli11-dev libgloo-dev
  python3-torch python3-numpy
  nodejs
  chromium  # renders `fanout report` pages in a test (tests/apps/fanout/test_cmd_report.cpp)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# HF tokenizers' Node bindings (tests/reference/hf_tokenizers.js), pinned: its
# prebuilt linux-x64-gnu binary ships inside the package.
install_hf_tokenizers() {
  local dir version=0.23.2
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node"
  grep -qs "\"version\": \"$version\"" "$dir/node_modules/tokenizers/package.json" && return 0
  echo "install_deps: npm install tokenizers@$version into $dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "tokenizers@$version" >/dev/null
}
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  install_hf_tokenizers
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_hf_tokenizers
echo "install_deps: done"
