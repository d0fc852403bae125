#!/usr/bin/env bash
# Installs the Debian packages fanout builds and tests with. Idempotent and quick
# when everything is already present: apt-get runs only for missing packages.
# Usage: third_party/install_deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libtbb-dev doctest-dev libopenblas-dev libdnnl-dev nlohmann-json3-dev libcli11-dev libgloo-dev
  python3-torch python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
