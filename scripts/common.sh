# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/demo.sh (sourced, not run): package installation and the
# Release build in build/. Callers set -euo pipefail.

MT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MT_BUILD_DIR="${MT_BUILD_DIR:-$MT_ROOT/build}"
# Extra -D options for the configure step. Set explicitly by the callers, so that what is built
# does not depend on options cached in an existing build directory.
MT_CMAKE_OPTIONS=()

mt_heading() { printf '\n==> %s\n' "$*"; }
mt_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Installs the packages of scripts/packages.txt (or of the list file given) that dpkg does not report
# as installed. apt-get update runs at most once, and only when something is missing. Works as root
# (CI) or through sudo.
mt_install_packages() {
  local list="${1:-$MT_ROOT/scripts/packages.txt}"
  mt_heading "Checking Debian packages ($(basename "$list"))"
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "dpkg not found: not a Debian system; assuming the packages in scripts/packages.txt are installed"
    return 0
  fi
  local required=() optional=() name flag
  while read -r name flag _ || [[ -n "$name" ]]; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    # "install ok installed": a removed package whose config files remain is also known to dpkg -s.
    dpkg -s "$name" 2>/dev/null | grep -q '^Status: install ok installed' && continue
    if [[ "$flag" == optional ]]; then optional+=("$name"); else required+=("$name"); fi
  done <"$list"
  if ((${#required[@]} + ${#optional[@]} == 0)); then
    echo "all packages present"
    return 0
  fi
  local missing=("${required[@]}" "${optional[@]}")
  echo "missing: ${missing[*]}"

  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo -n)  # -n: never prompt (CI has no terminal)
    else
      mt_die "not root and no sudo; install as root: apt-get install ${missing[*]}"
    fi
  fi
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  "${apt[@]}" update </dev/null || mt_die "apt-get update failed"
  if ((${#required[@]})); then
    "${apt[@]}" install -y --no-install-recommends "${required[@]}" </dev/null ||
      mt_die "could not install: ${required[*]}"
  fi
  if ((${#optional[@]})); then
    "${apt[@]}" install -y --no-install-recommends "${optional[@]}" </dev/null ||
      echo "warning: optional packages not installed: ${optional[*]}" >&2
  fi
}

# The AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/, or $MT_ASAN_BUILD_DIR) of
# scripts/test.sh --sanitize and scripts/test-cuda-host.sh: the same directory and options for both,
# so that neither rebuilds what the other built. The CUDA backend is executed on the host there
# (-DMIXTRAIN_CUDA=HOST), so its kernels and runtime calls run under both sanitizers. -O1: the
# instrumented build compiles and runs several times faster than at -O2 with full debug information;
# -g1 keeps line numbers in the reports. Every report fails the test that hits it.
mt_use_sanitizer_build() {
  MT_BUILD_DIR="${MT_ASAN_BUILD_DIR:-$MT_ROOT/build-asan}"
  MT_BUILD_TYPE=RelWithDebInfo
  MT_CMAKE_OPTIONS=(-DMIXTRAIN_BUILD_TESTS=ON -DMIXTRAIN_BUILD_EXAMPLES=ON -DMIXTRAIN_BUILD_BENCH=ON
    -DMIXTRAIN_BUILD_CLI=ON "-DMIXTRAIN_SANITIZE=address,undefined" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
    -DMIXTRAIN_CUDA=HOST)
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
}

# Configures a Release build in $MT_BUILD_DIR (Ninja, ccache when present) and builds the given
# targets (everything when none are given).
mt_build() {
  mt_heading "Configuring (${MT_BUILD_TYPE:-Release}, Ninja) in ${MT_BUILD_DIR#"$MT_ROOT"/}"
  local cache="$MT_BUILD_DIR/CMakeCache.txt"
  if [[ -f "$cache" ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$cache"; then
    echo "build directory was made with another generator; starting it afresh"
    rm -rf "$MT_BUILD_DIR/CMakeCache.txt" "$MT_BUILD_DIR/CMakeFiles"
  fi
  local args=(-S "$MT_ROOT" -B "$MT_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${MT_BUILD_TYPE:-Release}"
    "${MT_CMAKE_OPTIONS[@]}")
  if command -v ccache >/dev/null 2>&1; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    # Paths relative to the checkout, and no build directory in the hash of -g objects: a second
    # clone (CI's) reuses the objects of the first.
    export CCACHE_BASEDIR="$MT_ROOT" CCACHE_NOHASHDIR=true
  fi
  # MT_CUDA_ARCHITECTURES: the GPUs to compile CUDA code for (CMake's list; default sm_80 and sm_90
  # machine code and sm_90 PTX, cmake/Cuda.cmake). CI compiles for one: 90-real.
  if [[ -n "${MT_CUDA_ARCHITECTURES:-}" ]]; then args+=(-DCMAKE_CUDA_ARCHITECTURES="$MT_CUDA_ARCHITECTURES"); fi
  cmake "${args[@]}"

  mt_heading "Building ${*:-everything}"
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$MT_BUILD_DIR" -j "$(nproc)" "${targets[@]}"
}

# The MIXTRAIN_MAX_ISA levels below this CPU's own, lowest last ("generic" on an AVX2-only CPU,
# "avx512_bf16 avx512 avx2 generic" on one with AMX): the caps under which a different set of
# kernels runs. Read from /proc/cpuinfo, as mixtrain reads cpuid (mixtrain/cpu.h has the levels).
mt_isa_caps_below_native() {
  local flags level=0
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
  has avx2 fma f16c && level=1
  ((level == 1)) && has avx512f avx512bw avx512vl avx512dq && level=2
  ((level == 2)) && has avx512_bf16 && level=3
  ((level == 3)) && has amx_bf16 amx_tile && level=4
  local names=(generic avx2 avx512 avx512_bf16) caps=() i
  for ((i = level - 1; i >= 0; --i)); do caps+=("${names[i]}"); done
  echo "${caps[*]}"
}
