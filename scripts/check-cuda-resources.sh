#!/usr/bin/env bash
# The compiled CUDA kernels' resources for sm_90 (docs/cuda.md, "Resource usage for sm_90"): reads the
# sm_90 machine code already in a build's CUDA objects with `cuobjdump --dump-resource-usage` and
# fails when a kernel
#   - keeps any local memory (a stack frame: spill slots, or an array indexed at run time), unless
#     scripts/cuda-block-sizes.txt excuses that instantiation ("local" lines: not a spill, not
#     launched by a training step);
#   - cannot hold the blocks per SM that its launch assumes: registers per thread x the largest block
#     its launches ask for (scripts/cuda-block-sizes.txt, or the kernel's __launch_bounds__ as
#     compiled) must fit sm_90's register file of 65536 (allocated per warp in units of 256, in four
#     quarters of 16384) at least once, or as many times as its __launch_bounds__ min-blocks asks;
#   - uses more than 255 registers per thread or more than 48 KiB of static shared memory.
# Prints one line per kernel family and first type argument; --markdown FILE also writes the tables
# as Markdown. No GPU needed.
#
#   scripts/check-cuda-resources.sh [--markdown FILE] [BUILD_DIR]     # BUILD_DIR: build/ by default
#
# cuobjdump: $CUOBJDUMP, PATH, the build's nvcc directory or /usr/local/cuda/bin; otherwise the
# nvidia-cuda-cuobjdump wheel of the build's CUDA major version, installed once with pip into
# ${XDG_CACHE_HOME:-~/.cache}/mixtrain/. c++filt (binutils) names the kernels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

markdown=""
build=""
while (($#)); do
  case "$1" in
    --markdown)
      (($# >= 2)) || die "--markdown needs a file"
      markdown="$2"
      shift 2
      ;;
    --markdown=*)
      markdown="${1#--markdown=}"
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d;s/^# \{0,1\}//'
      exit 0
      ;;
    -*) die "unknown option '$1' (scripts/check-cuda-resources.sh [--markdown FILE] [BUILD_DIR])" ;;
    *)
      [[ -z "$build" ]] || die "one build directory only"
      build="$1"
      shift
      ;;
  esac
done
build="${build:-$root/build}"
[[ -d "$build" ]] || die "no build directory $build"
build="$(cd "$build" && pwd)"
command -v python3 >/dev/null 2>&1 || die "python3 is needed"
command -v c++filt >/dev/null 2>&1 || die "c++filt (binutils) is needed"

# The objects that nvcc compiled: the build statements of build.ninja that use a CUDA compiler rule,
# else every *.cu.o of the directory. A directory where none is expected has no CUDA device code.
objects=()
expected=0
if [[ -f "$build/build.ninja" ]]; then
  while read -r obj; do
    expected=$((expected + 1))
    [[ -f "$build/$obj" ]] && objects+=("$build/$obj")
  done < <(sed -n 's/^build \([^:]*\.cu\.o\): CUDA_COMPILER__.*/\1/p' "$build/build.ninja")
  if ((expected == 0)); then
    echo "check-cuda-resources: $build compiles no CUDA device code (no CUDA toolkit, MIXTRAIN_CUDA=OFF or HOST, or a sanitizer build): nothing to check"
    exit 0
  fi
  if ((${#objects[@]} < expected)); then
    die "$build: $((expected - ${#objects[@]})) of $expected CUDA objects are not built yet: build the library first"
  fi
else
  while IFS= read -r -d '' obj; do objects+=("$obj"); done < <(find "$build" -name '*.cu.o' -print0 | sort -z)
  if ((${#objects[@]} == 0)); then
    cache="$build/CMakeCache.txt"
    if [[ -f "$cache" ]] && grep -Eq '^CMAKE_CUDA_COMPILER:[A-Z]+=.*[^ ]' "$cache" &&
      ! grep -Eq '^MIXTRAIN_CUDA:[A-Z]+=(OFF|HOST)$' "$cache" && ! grep -Eq '^CMAKE_CUDA_COMPILER:[A-Z]+=.*NOTFOUND' "$cache"; then
      die "$build has a CUDA compiler but no CUDA objects (*.cu.o): build the library first"
    fi
    echo "check-cuda-resources: $build has no CUDA objects and no CUDA compiler: nothing to check"
    exit 0
  fi
fi

# cuobjdump, as described above.
nvcc=""
if [[ -f "$build/CMakeCache.txt" ]]; then nvcc="$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" | head -n1)"; fi
cuobjdump="${CUOBJDUMP:-}"
if [[ -z "$cuobjdump" ]]; then
  for c in "$(command -v cuobjdump 2>/dev/null || true)" "${nvcc:+$(dirname "$nvcc")/cuobjdump}" /usr/local/cuda/bin/cuobjdump; do
    if [[ -n "$c" && -x "$c" ]]; then
      cuobjdump="$c"
      break
    fi
  done
fi
if [[ -z "$cuobjdump" ]]; then
  major=""
  for n in "$nvcc" "$(command -v nvcc 2>/dev/null || true)" /usr/local/cuda/bin/nvcc; do
    if [[ -n "$n" && -x "$n" ]]; then
      major="$("$n" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -n1)"
      break
    fi
  done
  [[ -n "$major" ]] || die "no cuobjdump, and no nvcc to tell which CUDA version's to install: set CUOBJDUMP"
  tools="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mixtrain/cuobjdump-$major"
  cuobjdump="$(find "$tools" -name cuobjdump -type f -perm -u+x 2>/dev/null | head -n1 || true)"
  if [[ -z "$cuobjdump" ]]; then
    echo "check-cuda-resources: installing cuobjdump (nvidia-cuda-cuobjdump==$major.*) into $tools"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --target "$tools" \
      "nvidia-cuda-cuobjdump==$major.*" </dev/null ||
      die "could not install nvidia-cuda-cuobjdump with pip: install CUDA's cuobjdump and set CUOBJDUMP"
    cuobjdump="$(find "$tools" -name cuobjdump -type f | head -n1 || true)"
    [[ -n "$cuobjdump" ]] || die "the nvidia-cuda-cuobjdump wheel has no cuobjdump"
    chmod +x "$cuobjdump"
  fi
fi

export MT_CUOBJDUMP="$cuobjdump" MT_MARKDOWN="$markdown" MT_TABLE="$root/scripts/cuda-block-sizes.txt"
exec python3 - "${objects[@]}" <<'PY'
import os, re, subprocess, sys
from collections import defaultdict

CUOBJDUMP, TABLE, MARKDOWN = os.environ["MT_CUOBJDUMP"], os.environ["MT_TABLE"], os.environ["MT_MARKDOWN"]
objects = sys.argv[1:]

# sm_90 (compute capability 9.0) limits.
REGS_PER_SM, QUARTERS, REG_UNIT, MAX_REGS = 65536, 4, 256, 255
MAX_WARPS, MAX_BLOCKS, STATIC_SMEM = 64, 32, 48 * 1024
# cuobjdump's SHARED for sm_90 includes the 1 KiB that sm_90 reserves at the start of the shared
# memory of every block that uses any (dynamic only included).
RESERVED_SMEM = 1024

def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)

# ---- the launch table
blocks, local_ok = {}, []
for n, line in enumerate(open(TABLE), 1):
    words = line.split()  # a "local" line's REGEX may hold a '#': comments are whole lines only
    if not words or words[0].startswith("#"):
        continue
    if words[0] == "block" and len(words) in (3, 4):
        blocks[words[1]] = (int(words[2]), int(words[3]) if len(words) == 4 else None)
    elif words[0] == "local" and len(words) >= 5:
        local_ok.append({"family": words[1], "regex": re.compile(words[2]), "bytes": int(words[3]),
                         "reason": " ".join(words[4:]), "used": 0})
    else:
        die(f"{TABLE}:{n}: expected 'block FAMILY THREADS [MIN_BLOCKS]' or 'local FAMILY REGEX BYTES REASON'")

# ---- cuobjdump: the sm_90 ELF's resource usage and each kernel's .nv.info (__launch_bounds__)
def run(*args):
    r = subprocess.run([CUOBJDUMP, *args], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{' '.join([os.path.basename(CUOBJDUMP), *args])}: {r.stderr.strip()}")
    return r.stdout

kernels = []  # dicts: object, mangled, regs, stack, local, shared, max_threads, reg_cap
for obj in objects:
    elfs = run("--list-elf", obj)
    if not re.search(r"\bsm_90\.cubin\b", elfs):
        die(f"{obj} has no sm_90 machine code (its cubins: {' '.join(re.findall(r'sm_[0-9a-z]+', elfs)) or 'none'}): "
            "configure with CMAKE_CUDA_ARCHITECTURES including 90-real")
    section, arch, found = None, None, {}
    for line in run("--dump-resource-usage", "--gpu-architecture", "sm_90", obj).splitlines():
        if line.startswith("Fatbin elf code"):
            section = "elf"
        elif line.startswith("Fatbin ptx code"):
            section = "ptx"
        elif line.startswith("arch = "):
            arch = line.split("=", 1)[1].strip()
        elif section == "elf" and arch == "sm_90":
            m = re.match(r"\s*Function (\S+):\s*$", line)
            if m:
                name = m.group(1)
                continue
            if "REG:" in line:
                f = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line))
                found[name] = {"object": obj, "mangled": name, "regs": int(f["REG"]), "stack": int(f["STACK"]),
                               "local": int(f["LOCAL"]), "shared": int(f["SHARED"]), "max_threads": None,
                               "reg_cap": MAX_REGS}
    info = None
    attr = None
    for line in run("--dump-elf", "--gpu-architecture", "sm_90", obj).splitlines():
        m = re.match(r"^\.nv\.info\.(\S+)$", line)
        if m:
            info = found.get(m.group(1))
            continue
        if line and not line[0].isspace():
            info = None
        if info is None:
            continue
        m = re.match(r"\s*Attribute:\s*(\S+)", line)
        if m:
            attr = m.group(1)
            continue
        m = re.match(r"\s*Value:\s*(.*)", line)
        if m and attr == "EIATTR_MAX_THREADS":
            x, y, z = (int(v, 16) for v in m.group(1).split()[:3])
            info["max_threads"] = x * y * z
        elif m and attr == "EIATTR_MAXREG_COUNT":
            info["reg_cap"] = int(m.group(1).split()[0], 16)
    if not found:
        die(f"{obj}: no kernel in its sm_90 code")
    kernels.extend(found.values())

# ---- names: family (the kernel template's name) and dtype (its first scalar type argument)
demangled = subprocess.run(["c++filt"], input="\n".join(k["mangled"] for k in kernels), capture_output=True,
                           text=True, check=True).stdout.splitlines()
DTYPES = [("mixtrain::bfloat16", "bf16"), ("mixtrain::float16", "f16"), ("__nv_bfloat16", "bf16"),
          ("__half", "f16"), ("double", "f64"), ("float", "f32"), ("bool", "bool"), ("signed char", "i8"),
          ("unsigned char", "u8"), ("unsigned short", "u16"), ("short", "i16"), ("unsigned int", "u32"),
          ("unsigned long long", "u64"), ("unsigned long", "u64"), ("long long", "i64"), ("long", "i64"),
          ("int", "i32"), ("char", "i8")]
DTYPE_RE = re.compile(r"(?<![\w:])(" + "|".join(re.escape(t) for t, _ in DTYPES) + r")(?![\w:])")

def strip_parens(s):
    out, depth = [], 0
    for ch in s:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)

for k, name in zip(kernels, demangled):
    k["name"] = name
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)", "anon")
    m = re.match(r"[\w:]+", s)
    k["family"] = m.group(0).split("::")[-1] if m else k["mangled"]
    rest = s[m.end():] if m else ""
    targs = ""
    if rest.startswith("<"):  # the kernel's own template arguments, without parameter lists
        depth = 0
        for i, ch in enumerate(rest):
            depth += {"<": 1, ">": -1}.get(ch, 0)
            if depth == 0:
                targs = rest[1:i]
                break
    t = DTYPE_RE.search(strip_parens(re.sub(r"\{lambda\([^)]*\)#\d+\}", "", targs)))
    k["dtype"] = dict(DTYPES)[t.group(1)] if t else "-"

# ---- the checks
def blocks_per_sm(regs, threads):
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // REG_UNIT) * REG_UNIT
    by_regs = QUARTERS * ((REGS_PER_SM // QUARTERS) // per_warp) // warps
    return min(by_regs, MAX_WARPS // warps, MAX_BLOCKS)

failures, unknown = [], set()
for k in kernels:
    k["static_smem"] = k["shared"] - RESERVED_SMEM if k["shared"] >= RESERVED_SMEM else k["shared"]
    table = blocks.get(k["family"])
    if k["max_threads"] is not None:
        if table and table[0] != k["max_threads"]:
            failures.append((k, f"__launch_bounds__({k['max_threads']}) but {os.path.basename(TABLE)} says {table[0]} threads"))
        k["threads"] = k["max_threads"]
    elif table:
        k["threads"] = table[0]
    else:
        unknown.add(k["family"])
        k["threads"], k["blocks"], k["min_blocks"] = None, None, None
        continue
    # Min blocks per SM: the table's, or what __launch_bounds__ asked for (the register cap the compiler
    # recorded, below 255 only when a min-blocks was given), or 1.
    implied = max(1, REGS_PER_SM // (k["threads"] * k["reg_cap"])) if k["reg_cap"] < MAX_REGS else 1
    k["min_blocks"] = table[1] if table and table[1] else implied
    k["blocks"] = blocks_per_sm(k["regs"], k["threads"])
    if k["regs"] > MAX_REGS:
        failures.append((k, f"{k['regs']} registers per thread (sm_90 has at most {MAX_REGS})"))
    if k["blocks"] < k["min_blocks"]:
        failures.append((k, f"{k['regs']} registers x {k['threads']} threads: blocks per SM {k['blocks']}, "
                            f"assumed {k['min_blocks']}"))
    if k["static_smem"] > STATIC_SMEM:
        failures.append((k, f"{k['static_smem']} bytes of static shared memory (at most {STATIC_SMEM})"))
for k in kernels:
    frame = max(k["stack"], k["local"])
    k["excused"] = False
    if frame == 0:
        continue
    for e in local_ok:
        if e["family"] == k["family"] and e["regex"].search(k["name"]) and frame <= e["bytes"]:
            e["used"] += 1
            k["excused"] = True
            break
    else:
        failures.append((k, f"local memory: {k['stack']}-byte stack frame, {k['local']} bytes local "
                            "(a spill, or an array indexed at run time)"))
for family in sorted(unknown):
    failures.append(({"name": family, "object": ""}, f"no launch configuration: add 'block {family} THREADS' "
                                                     f"to scripts/{os.path.basename(TABLE)}"))

# ---- tables
groups = defaultdict(list)
for k in kernels:
    groups[(k["family"], k["dtype"])].append(k)
families = defaultdict(list)
for k in kernels:
    families[k["family"]].append(k)

def summary(ks):
    known = [k for k in ks if k["threads"] is not None]
    return {
        "n": len(ks),
        "regs": max(k["regs"] for k in ks),
        "regs_min": min(k["regs"] for k in ks),
        "local": max(max(k["stack"], k["local"]) for k in ks),
        "excused": sum(k["excused"] for k in ks),
        "smem": max(k["static_smem"] for k in ks),
        "threads": "/".join(sorted({str(k["threads"]) for k in known}, key=int)) if known else "?",
        "blocks": min(k["blocks"] for k in known) if known else "?",
        "lb": any(k["max_threads"] is not None for k in ks),
    }

DTYPE_ORDER = {d: i for i, d in enumerate(["f32", "f64", "f16", "bf16", "bool", "u8", "i8", "i16", "u16", "i32",
                                           "u32", "i64", "u64", "-"])}
rows = []
for (family, dtype), ks in sorted(groups.items(), key=lambda g: (g[0][0], DTYPE_ORDER.get(g[0][1], 99))):
    rows.append((family, dtype, summary(ks)))

def local_text(s):
    return f"{s['local']} ({s['excused']} excused)" if s["excused"] else str(s["local"])

hdr = ("kernel family", "dtype", "kernels", "registers", "local B", "static smem B", "threads", "blocks/SM")
table = [hdr] + [(f, d, str(s["n"]), str(s["regs"]), local_text(s), str(s["smem"]), s["threads"], str(s["blocks"]))
                 for f, d, s in rows]
widths = [max(len(r[i]) for r in table) for i in range(len(hdr))]
print(f"sm_90 resource usage: {len(kernels)} kernels in {len(objects)} objects ({os.path.basename(CUOBJDUMP)}: "
      f"{CUOBJDUMP})")
for r in table:
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
print("registers: the most per thread; local B: the largest stack frame (spills or local arrays); static smem"
      " B: without sm_90's 1 KiB reserve; threads: the largest block launched; blocks/SM: the fewest that"
      " sm_90's register file and thread limits allow at that size (dynamic shared memory aside)")
for e in local_ok:
    if not e["used"]:
        print(f"warning: the 'local {e['family']} {e['regex'].pattern}' entry matches no kernel", file=sys.stderr)

if MARKDOWN:
    with open(MARKDOWN, "w") as md:
        md.write("| kernel family | kernels | dtypes | registers | local memory (B) | static shared (B) | threads "
                 "per block | blocks/SM |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
        for family in sorted(families):
            s = summary(families[family])
            dts = sorted({k["dtype"] for k in families[family]}, key=lambda d: DTYPE_ORDER.get(d, 99))
            regs = str(s["regs"]) if s["regs"] == s["regs_min"] else f"{s['regs_min']}-{s['regs']}"
            threads = f"{s['threads']} (`__launch_bounds__`)" if s["lb"] else s["threads"]
            md.write(f"| `{family}` | {s['n']} | {', '.join(dts)} | {regs} | {local_text(s)} | {s['smem']} | {threads} "
                     f"| {s['blocks']} |\n")
        md.write("\n| kernel family | dtype | kernels | registers (max) | local memory (B) | static shared (B) | "
                 "threads per block | blocks/SM (min) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
        for f, d, s in rows:
            md.write(f"| `{f}` | {d} | {s['n']} | {s['regs']} | {local_text(s)} | {s['smem']} | {s['threads']} "
                     f"| {s['blocks']} |\n")
    print(f"wrote {MARKDOWN}")

if failures:
    print(f"\nFAILED: {len(failures)} problem(s) in the sm_90 code:", file=sys.stderr)
    for k, why in failures:
        where = f" [{os.path.basename(k['object'])}]" if k.get("object") else ""
        print(f"  {k['name']}{where}\n      {why}", file=sys.stderr)
    sys.exit(1)
print(f"ok: {len(kernels)} kernels: no local memory outside the {sum(e['used'] for e in local_ok)} excused, "
      "registers and static shared memory within sm_90's limits at their launch sizes")
PY
