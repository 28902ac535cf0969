#!/usr/bin/env bash
# Run HERE (Debian 12, as root or through sudo) before a device run of scripts/gpu-check.sh: downloads
# the Debian 12 .deb files that mixtrain's build needs and the lent GPU machine lacks into .gpu-debs/
# (git-ignored; carried to the device with `carry: [".gpu-debs"]`). gpu-check.sh unpacks them there
# with dpkg -x into a private prefix, never into /.
#
#   scripts/gpu-check-prepare.sh        # idempotent: keeps files already present, drops stale versions
#
# The packages: oneDNN (runtime + CMake config), the OpenCL loader and headers that Debian's
# dnnl-config.cmake requires (find_package(OpenCL REQUIRED)), nlohmann-json, zlib (headers and the
# libz.so link; the runtime too, so that the link does not dangle in the prefix), GoogleTest/GoogleMock,
# CLI11 (the mixtrain CLI) and Google Benchmark (so that bench/CMakeLists.txt gets past its
# `find_package(benchmark)` gate). Prints each file and the total size, which must stay far below the
# 64 MiB a device run may carry (about 10 MiB in all).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${MT_GPU_DEBS:-$ROOT/.gpu-debs}"
MAX_BYTES=$((40 * 1024 * 1024)) # refuse anything near the 64 MiB the working tree may carry in all

PACKAGES=(
  libdnnl2 libdnnl-dev
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  nlohmann-json3-dev
  zlib1g zlib1g-dev
  libgtest-dev libgmock-dev
  libcli11-dev
  libbenchmark1debian libbenchmark-dev
)

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: run this on the Debian 12 development machine"
arch="$(dpkg --print-architecture)"
[[ "$arch" == amd64 ]] || die "this machine is $arch; the GPU machine is x86-64 (amd64): download the .debs on an amd64 Debian 12"

sudo=()
if [[ "$(id -u)" -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo (apt-get update may be needed)"
  sudo=(sudo -n)
fi

updated=0
apt_update() {
  ((updated)) && return 0
  echo "==> apt-get update"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >/dev/null || die "apt-get update failed"
  updated=1
}

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2; exit}'; }

mkdir -p "$DEST"
if ! git -C "$ROOT" check-ignore -q "$DEST/x.deb" 2>/dev/null; then
  echo "warning: $DEST is not ignored by git; add '/.gpu-debs/' to .gitignore" >&2
fi

wanted=()
for pkg in "${PACKAGES[@]}"; do
  ver="$(candidate "$pkg")"
  if [[ -z "$ver" || "$ver" == "(none)" ]]; then
    apt_update
    ver="$(candidate "$pkg")"
    [[ -n "$ver" && "$ver" != "(none)" ]] || die "no candidate version of $pkg in the apt lists"
  fi
  # apt-get download writes the epoch's ':' as %3a: zlib1g_1%3a1.2.13.dfsg-1_amd64.deb
  stem="${pkg}_${ver//:/%3a}_"
  existing=("$DEST/$stem"*.deb)
  if [[ -f "${existing[0]}" ]]; then
    wanted+=("$(basename "${existing[0]}")")
    continue
  fi
  echo "==> downloading $pkg=$ver"
  if ! (cd "$DEST" && apt-get -o APT::Sandbox::User=root download "$pkg=$ver" </dev/null); then
    apt_update
    ver="$(candidate "$pkg")"
    stem="${pkg}_${ver//:/%3a}_"
    (cd "$DEST" && apt-get -o APT::Sandbox::User=root download "$pkg=$ver" </dev/null) || die "apt-get download $pkg=$ver failed"
  fi
  existing=("$DEST/$stem"*.deb)
  [[ -f "${existing[0]}" ]] || die "apt-get download $pkg=$ver wrote no file named $stem*.deb"
  wanted+=("$(basename "${existing[0]}")")
done

# Drop files that are not the current version of a listed package (older versions, removed entries).
for f in "$DEST"/*.deb; do
  [[ -e "$f" ]] || continue
  keep=0
  for w in "${wanted[@]}"; do [[ "$(basename "$f")" == "$w" ]] && keep=1 && break; done
  if ((!keep)); then
    echo "removing stale $(basename "$f")"
    rm -f -- "$f"
  fi
done

echo
echo "==> ${#wanted[@]} packages in ${DEST#"$ROOT"/}/"
total=0
for w in "${wanted[@]}"; do
  size=$(stat -c %s "$DEST/$w")
  total=$((total + size))
  printf '  %8.1f KiB  %s\n' "$(awk -v s="$size" 'BEGIN {print s / 1024}')" "$w"
done
printf 'total: %d bytes (%.1f MiB)\n' "$total" "$(awk -v s="$total" 'BEGIN {print s / 1048576}')"
((total <= MAX_BYTES)) || die "the .debs take $total bytes, over the $MAX_BYTES-byte limit set for a device run"
echo "carry this folder in the device run: carry [\".gpu-debs\"], command: bash scripts/gpu-check.sh \"\$OUT\""
