#!/usr/bin/env bash
# Run HERE (Debian 12, as root or through sudo) before a device run of scripts/gpu-check.sh: downloads
# the Debian 12 .deb files that mixtrain's build needs and the lent GPU machine lacks into .gpu-debs/
# (git-ignored; carried to the device with `carry: [".gpu-debs"]`), and stages NVIDIA's compute-sanitizer
# in .gpu-debs/compute-sanitizer/. gpu-check.sh unpacks the .debs there with dpkg -x into a private
# prefix, never into /, and runs the CUDA tests under the sanitizer.
#
#   scripts/gpu-check-prepare.sh        # idempotent: keeps files already present, drops stale versions
#
# The packages: oneDNN (runtime + CMake config), the OpenCL loader and headers that Debian's
# dnnl-config.cmake requires (find_package(OpenCL REQUIRED)), nlohmann-json, zlib (headers and the
# libz.so link; the runtime too, so that the link does not dangle in the prefix), GoogleTest/GoogleMock,
# CLI11 (the mixtrain CLI) and Google Benchmark (so that bench/CMakeLists.txt gets past its
# `find_package(benchmark)` gate). About 10 MiB.
#
# The sanitizer: the wheel nvidia-cuda-sanitizer-api from the Python package registry (pip download,
# no install), unpacked with Python's zipfile. Only its 13.4.92 and later wheels hold the whole tool:
# the earlier ones (13.0.x, the CUDA 13.0 of this machine and the GPU machine, up to 13.4.57) carry the
# compute-sanitizer binary without TreeLauncherSubreaper, so it cannot start a program ("Target
# application terminated before first instrumented API call"). Kept: the tool's directory less its
# docs, headers and 32-bit x86/ helpers (the tests are 64-bit), about 36 MiB; checked here by running
# `compute-sanitizer --version` (no GPU needed). MT_SANITIZER_VERSION picks another wheel version;
# MT_SANITIZER=0 skips the sanitizer. gpu-check.sh prefers the toolkit's own compute-sanitizer when the
# GPU machine has one (its version matches the driver's CUDA) and falls back to this copy.
#
# Prints each file and the sizes; the folder must stay well below the 64 MiB a device run may carry
# with the working tree (at most 56 MiB here).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${MT_GPU_DEBS:-$ROOT/.gpu-debs}"
MAX_BYTES=$((40 * 1024 * 1024)) # refuse anything near the 64 MiB the working tree may carry in all
MAX_TOTAL_BYTES=$((56 * 1024 * 1024)) # .debs and sanitizer: the repository (about 5 MiB) travels too
SANITIZER_VERSION="${MT_SANITIZER_VERSION:-13.4.92}"
SANITIZER_DIR="$DEST/compute-sanitizer"
PY="${MT_PYTHON:-python3}"

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

# --- compute-sanitizer ---------------------------------------------------------------------------------
# The files of the wheel's nvidia/cu13/compute-sanitizer/ that the tool needs to run a 64-bit program:
# the front end, the launcher helpers it executes, the injection libraries it preloads into the target
# and the sanitizer libraries.
SANITIZER_FILES=(
  compute-sanitizer TreeLauncherSubreaper TreeLauncherTargetLdPreloadHelper
  libInterceptorInjectionTarget.so libTreeLauncherPlaceholder.so libTreeLauncherTargetInjection.so
  libTreeLauncherTargetUpdatePreloadInjection.so libsanitizer-collection.so libsanitizer-public.so
)
sanitizer_ok() {
  local f
  [[ "$(cat "$SANITIZER_DIR/WHEEL_VERSION" 2>/dev/null)" == "$SANITIZER_VERSION" ]] || return 1
  for f in "${SANITIZER_FILES[@]}"; do [[ -f "$SANITIZER_DIR/$f" ]] || return 1; done
  timeout 30 "$SANITIZER_DIR/compute-sanitizer" --version >/dev/null 2>&1
}
SANITIZER_TMP=""
trap '[[ -z "$SANITIZER_TMP" ]] || rm -rf -- "$SANITIZER_TMP"' EXIT
stage_sanitizer() {
  local tmp wheel
  tmp="$(mktemp -d)"
  SANITIZER_TMP="$tmp"
  echo "==> downloading nvidia-cuda-sanitizer-api==$SANITIZER_VERSION (pip download, no install)"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --implementation py --python-version 3 \
    --platform manylinux_2_25_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$tmp" "nvidia-cuda-sanitizer-api==$SANITIZER_VERSION" </dev/null ||
    die "pip download nvidia-cuda-sanitizer-api==$SANITIZER_VERSION failed"
  wheel="$(find "$tmp" -maxdepth 1 -name 'nvidia_cuda_sanitizer_api-*.whl' | head -1)"
  [[ -n "$wheel" ]] || die "pip download wrote no nvidia_cuda_sanitizer_api wheel"
  rm -rf "$SANITIZER_DIR"
  mkdir -p "$SANITIZER_DIR"
  # zipfile keeps no file modes: every kept file is an executable or a shared library, so all get 0755.
  "$PY" - "$wheel" "$SANITIZER_DIR" "${SANITIZER_FILES[@]}" <<'EOF' || die "unpacking $wheel failed"
import os, sys, zipfile
wheel, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    members = {m.filename: m for m in z.infolist()}
    tool = [n for n in members if n.endswith("/compute-sanitizer/compute-sanitizer")]
    if not tool:
        sys.exit("no */compute-sanitizer/compute-sanitizer in %s: this wheel holds the binary alone, "
                 "without the launcher it needs (pick 13.4.92 or later)" % os.path.basename(wheel))
    base = tool[0][: -len("compute-sanitizer")]
    missing = [n for n in names if base + n not in members]
    if missing:
        sys.exit("missing in %s: %s" % (os.path.basename(wheel), ", ".join(missing)))
    for n in names:
        with z.open(base + n) as src, open(os.path.join(dest, n), "wb") as out:
            out.write(src.read())
        os.chmod(os.path.join(dest, n), 0o755)
    for n in members:
        if n.endswith(".dist-info/licenses/License.txt") or n.endswith(".dist-info/License.txt"):
            with z.open(n) as src, open(os.path.join(dest, "LICENSE.txt"), "wb") as out:
                out.write(src.read())
            break
EOF
  echo "$SANITIZER_VERSION" >"$SANITIZER_DIR/WHEEL_VERSION"
  rm -rf -- "$tmp"
  SANITIZER_TMP=""
}
if [[ "${MT_SANITIZER:-1}" != 0 ]]; then
  if sanitizer_ok; then
    echo "compute-sanitizer from nvidia-cuda-sanitizer-api $SANITIZER_VERSION already in ${SANITIZER_DIR#"$ROOT"/}/"
  else
    stage_sanitizer
  fi
  version="$(timeout 30 "$SANITIZER_DIR/compute-sanitizer" --version 2>&1)" ||
    die "$SANITIZER_DIR/compute-sanitizer does not run here: $version"
  printf '%s: %s\n' "${SANITIZER_DIR#"$ROOT"/}/compute-sanitizer" "$(grep -m1 '^Version' <<<"$version")"
  printf '  %8.1f KiB  %s/ (%d files)\n' "$(du -sk "$SANITIZER_DIR" | awk '{print $1}')" \
    "${SANITIZER_DIR#"$ROOT"/}" "$(find "$SANITIZER_DIR" -type f | wc -l)"
fi

all="$(du -sb "$DEST" | awk '{print $1}')"
printf '%s in all: %d bytes (%.1f MiB)\n' "${DEST#"$ROOT"/}/" "$all" "$(awk -v s="$all" 'BEGIN {print s / 1048576}')"
((all <= MAX_TOTAL_BYTES)) || die "${DEST#"$ROOT"/}/ takes $all bytes, over the $MAX_TOTAL_BYTES-byte limit set for a device run"
echo "carry this folder in the device run: carry [\".gpu-debs\"], command: bash scripts/gpu-check.sh \"\$OUT\""
