#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh (the one-shot check on a lent H200): the machine inventory, the
device-generic test filter, and the summary that turns the phases' raw outputs into JSON files and
the table printed last. Standard library only; runs under any Python 3.8+ (no torch import here,
except in a child process of `env` with a timeout).

  gpu_summary.py env --out OUT/env.json [--nvcc PATH] [--nvidia-smi PATH] [--hints FILE]
      nvidia-smi -L and its GPU query, nvcc/CMake/ninja/g++/Python/torch versions, torch's view of the
      device (child process), and where libcudnn/libcublasLt/libcublas/libnccl/libcudart/libnvrtc
      are: the toolkit's lib dirs, the loader cache (ldconfig -p), torch's lib dir and the NVIDIA
      wheels under site-packages/nvidia/*/lib. --hints writes KEY=VALUE lines (CUDNN_ROOT,
      CUDNN_LIBDIR, NCCL_ROOT, NCCL_LIBDIR) that the check passes to CMake and the loader.
  gpu_summary.py checked-filter [--cuda] tests/CMakeLists.txt
      prints the gtest filter of MIXTRAIN_CHECKED_SUITES (the string(CONCAT ...) literals joined); with
      --cuda, the suites of MIXTRAIN_CUDA_SKIPPED_SUITES are excluded as well.
  gpu_summary.py summary --work WORK --out OUT [--budget S] [--quiet]
      reads WORK/phases.tsv (name, status, rc, milliseconds, note per phase) and each phase's raw
      output in WORK, writes OUT/summary.json (with "sanitizer": per compute-sanitizer tool, its test
      counts, ERROR/RACECHECK SUMMARY numbers and first message), OUT/tests.json (the gtest JSON
      reports, the NCCL smoke test's and those of the runs under compute-sanitizer among them), OUT/bench.json
      (mixtrain: cuda_gemm_bench and `mixtrain bench` runs), OUT/torch.json (torch_gemm.py and
      torch_gpt.py runs), and prints the table: phase, status, seconds, headline numbers; GPT-small per
      implementation and precision; the issue's targets with PASS/FAIL (n/a where a number is missing):
        bf16 AMP step >= 2.5x faster than mixtrain's own fp32 step
        mixtrain bf16 step faster than PyTorch eager bf16 autocast (same model, batch)
        mixtrain bf16 GEMM >= 60% of 790 TFLOP/s: at 8192^3, and over the GPT shapes (total FLOPs / time)
        mixtrain bf16 peak memory <= 0.6x its fp32 peak

Assumed output of the other tools (parsed leniently): `cuda_gemm_bench --json` prints one JSON object
(or JSON lines) holding records with m, n, k, a dtype/precision name and tflops (or a time in ms/us);
`mixtrain bench --json` prints one JSON object per run with step_ms_median, samples_per_sec, gflops and
peak_bytes (device_peak_bytes preferred when present); a GPT sample is one sequence of `context`
tokens (1024 for gpt-small when the JSON does not say).
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

PEAK = 790.0
GIB = float(2**30)
PHASE_ORDER = ("inventory", "build", "tests", "nccl", "memcheck", "racecheck", "synccheck", "gemm", "mixtrain_gpt",
               "torch_eager", "torch_compile")
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
LIB_NAMES = ("libcudnn", "libcublasLt", "libcublas", "libnccl", "libcudart", "libnvrtc")


# ----------------------------------------------------------------------------------------------------
# env


def run_cmd(cmd, timeout=20):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
        return {"rc": p.returncode, "out": p.stdout.strip()[-4000:]}
    except FileNotFoundError:
        return {"rc": 127, "out": "not found: %s" % cmd[0]}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "timed out after %ss" % timeout}
    except OSError as e:
        return {"rc": 126, "out": str(e)}


TORCH_PROBE = r"""
import json, torch
d = {"version": torch.__version__, "cuda": torch.version.cuda, "file": torch.__file__,
     "cuda_available": torch.cuda.is_available()}
try:
    d["cudnn"] = torch.backends.cudnn.version()
except Exception as e:
    d["cudnn"] = "error: %s" % e
if d["cuda_available"]:
    p = torch.cuda.get_device_properties(0)
    d.update(device_count=torch.cuda.device_count(), name=p.name, capability="%d.%d" % (p.major, p.minor),
             sm_count=p.multi_processor_count, total_memory=p.total_memory,
             l2_cache_size=getattr(p, "L2_cache_size", None))
print(json.dumps(d))
"""


def package_dirs(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [str(p) for p in spec.submodule_search_locations]
    return [os.path.dirname(spec.origin)] if spec.origin else []


def find_libraries(nvcc):
    dirs = []  # (source, dir)
    roots = []
    if nvcc and os.path.exists(nvcc):
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            roots.append(os.environ[env])
    roots += ["/usr/local/cuda"]
    for r in roots:
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            dirs.append(("toolkit", os.path.join(r, sub)))
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"):
        dirs.append(("system", d))
    for d in package_dirs("torch"):
        dirs.append(("torch", os.path.join(d, "lib")))
    wheel_roots = package_dirs("nvidia")
    for w in wheel_roots:
        for lib in sorted(glob.glob(os.path.join(w, "*", "lib")) + glob.glob(os.path.join(w, "*", "*", "lib"))):
            dirs.append(("wheel", lib))
    found = {n: [] for n in LIB_NAMES}
    seen = set()
    for source, d in dirs:
        if not os.path.isdir(d):
            continue
        for path in sorted(glob.glob(os.path.join(d, "lib*.so*"))):
            base = os.path.basename(path)
            for n in LIB_NAMES:
                if re.match(re.escape(n) + r"\.so(\.|$)", base):
                    real = os.path.realpath(path)
                    if (n, real) in seen:  # lib/ and lib64/, the .so link and its versioned file: one entry
                        continue
                    seen.add((n, real))
                    found[n].append({"path": path, "source": source, "real": real})
    ld = run_cmd(["ldconfig", "-p"], timeout=10)
    ldcache = {}
    if ld["rc"] == 0:
        for line in ld["out"].splitlines():
            m = re.match(r"\s*(\S+) .*=> (\S+)", line)
            if m:
                for n in LIB_NAMES:
                    if re.match(re.escape(n) + r"\.so(\.|$)", m.group(1)):
                        ldcache.setdefault(n, []).append(m.group(2))
    return found, ldcache, wheel_roots


def cmd_env(a):
    t0 = time.time()
    env = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hostname": os.uname().nodename,
           "uname": " ".join(os.uname()), "nproc": os.cpu_count(), "python": sys.version.split()[0],
           "python_executable": sys.executable}
    try:
        with open("/etc/os-release") as f:
            env["os"] = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', f.read(), re.M)).get("PRETTY_NAME")
    except OSError:
        env["os"] = None
    try:
        with open("/proc/meminfo") as f:
            env["mem_total_kib"] = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
    except (OSError, AttributeError):
        pass
    smi = a.nvidia_smi or "nvidia-smi"
    env["nvidia_smi_L"] = run_cmd([smi, "-L"])
    env["nvidia_smi_query"] = run_cmd([smi, "--query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,"
                                       "clocks.max.sm,clocks.mem,temperature.gpu,power.draw",
                                       "--format=csv,noheader"])
    env["gpu"] = env["nvidia_smi_L"]["rc"] == 0 and "GPU " in env["nvidia_smi_L"]["out"]
    env["nvcc_path"] = a.nvcc or None
    env["nvcc"] = run_cmd([a.nvcc or "nvcc", "--version"])
    for tool, cmd in (("cmake", ["cmake", "--version"]), ("ninja", ["ninja", "--version"]),
                      ("gxx", ["g++", "--version"]), ("dpkg", ["dpkg", "--version"])):
        r = run_cmd(cmd)
        r["out"] = r["out"].splitlines()[0] if r["out"] else ""
        env[tool] = r
    probe = run_cmd([sys.executable, "-c", TORCH_PROBE], timeout=45)
    try:
        env["torch"] = json.loads(probe["out"].splitlines()[-1])
    except (ValueError, IndexError):
        env["torch"] = {"error": probe["out"][-1500:]}
    found, ldcache, wheel_roots = find_libraries(a.nvcc)
    env["libraries"] = found
    env["ldconfig"] = ldcache
    env["nvidia_wheel_roots"] = wheel_roots
    hints = {}
    for key, lib in (("CUDNN", "libcudnn"), ("NCCL", "libnccl")):
        # Prefer the toolkit/system copy; else the wheel (whose root is the folder above lib/).
        cands = sorted(found[lib], key=lambda r: {"toolkit": 0, "system": 1, "wheel": 2, "torch": 3}[r["source"]])
        if cands:
            libdir = os.path.dirname(cands[0]["path"])
            hints[key + "_LIBDIR"] = libdir
            hints[key + "_ROOT"] = os.path.dirname(libdir)
            hints[key + "_SOURCE"] = cands[0]["source"]
    env["hints"] = hints
    env["seconds"] = round(time.time() - t0, 2)
    with open(a.out, "w") as f:
        json.dump(env, f, indent=1)
    if a.hints:
        with open(a.hints, "w") as f:
            for k, v in hints.items():
                f.write("%s=%s\n" % (k, v))
    tq = env["torch"]
    print("inventory: gpu=%s | %s | torch %s (cuda %s, cudnn %s) | nvcc %s | %s" % (
        env["gpu"], env["nvidia_smi_query"]["out"].splitlines()[0] if env["nvidia_smi_query"]["rc"] == 0 else "no nvidia-smi",
        tq.get("version"), tq.get("cuda"), tq.get("cudnn"), nvcc_version(env), env["cmake"]["out"]))
    for n in LIB_NAMES:
        print("  %-12s %s" % (n, ", ".join("%s (%s)" % (r["path"], r["source"]) for r in found[n][:3]) or "not found"))
    return 0


def nvcc_version(env):
    m = re.search(r"release ([\d.]+)", env.get("nvcc", {}).get("out", ""))
    return m.group(1) if m else None


# ----------------------------------------------------------------------------------------------------
# checked-filter


def concat_literals(text, name):
    """The string(CONCAT NAME "..." ...) literals of a CMake file, joined; None when NAME is absent."""
    m = re.search(r"string\(\s*CONCAT\s+%s\b" % re.escape(name), text)
    if not m:
        return None
    parts = []
    for tok in re.finditer(r'"((?:[^"\\]|\\.)*)"|#[^\n]*|\)', text[m.end():]):
        if tok.group(0) == ")":
            break
        if tok.group(1) is not None:
            parts.append(tok.group(1))
    return "".join(parts)


def cmd_checked_filter(a):
    with open(a.cmakelists) as f:
        text = f.read()
    flt = concat_literals(text, "MIXTRAIN_CHECKED_SUITES")
    if not flt:
        print("MIXTRAIN_CHECKED_SUITES not found in %s" % a.cmakelists, file=sys.stderr)
        return 1
    if a.cuda:
        skipped = concat_literals(text, "MIXTRAIN_CUDA_SKIPPED_SUITES")
        if skipped:
            # gtest: "positive[-negative]"; the negatives are one ':'-separated list after the '-'.
            flt += (":" if "-" in flt else "-") + skipped
    print(flt)
    return 0


# ----------------------------------------------------------------------------------------------------
# summary


def read_text(path, limit=None):
    try:
        with open(path, errors="replace") as f:
            s = f.read()
    except OSError:
        return None
    return s if limit is None else s[-limit:]


def json_objects(text):
    """Every JSON object in a tool's stdout: the whole text, else each line that parses."""
    if not text:
        return []
    try:
        v = json.loads(text)
        return [v] if isinstance(v, dict) else [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def read_phases(work):
    phases = {}
    text = read_text(os.path.join(work, "phases.tsv")) or ""
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) < 4:
            continue
        name, status, rc, ms = f[:4]
        note = f[4] if len(f) > 4 else ""
        try:
            rc_v = int(rc)
        except ValueError:
            rc_v = None
        try:
            secs = round(int(ms) / 1000.0, 1)
        except ValueError:
            secs = None
        phases[name] = {"status": status, "rc": rc_v, "seconds": secs, "note": note}
    return phases


def gtest_counts(json_path, log_path):
    """(counts, report): from gtest's JSON report, else (killed run) from its console log."""
    rep = None
    text = read_text(json_path)
    if text:
        try:
            rep = json.loads(text)
        except ValueError:
            rep = None
    if rep is not None:
        passed = failed = skipped = 0
        failures = []
        for suite in rep.get("testsuites", []):
            for t in suite.get("testsuite", []):
                if t.get("failures"):
                    failed += 1
                    msg = t["failures"][0].get("failure", "") if isinstance(t["failures"][0], dict) else ""
                    failures.append({"name": "%s.%s" % (suite.get("name"), t.get("name")), "message": msg[:600]})
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    skipped += 1
                else:
                    passed += 1
        return {"source": "json", "total": passed + failed + skipped, "passed": passed, "failed": failed,
                "skipped": skipped, "failures": failures[:40]}, rep
    log = read_text(log_path)
    if log is None:
        return None, None
    ok = len(re.findall(r"^\[       OK \] \S+ \(\d+ ms\)", log, re.M))
    failed_names = re.findall(r"^\[  FAILED  \] (\S+) \(\d+ ms\)", log, re.M)
    skipped = len(re.findall(r"^\[  SKIPPED \] \S+ \(\d+ ms\)", log, re.M))
    started = re.findall(r"^\[ RUN      \] (\S+)", log, re.M)
    done = ok + len(failed_names) + skipped
    unfinished = started[-1] if len(started) > done else None
    return {"source": "log (no JSON report: killed or crashed)", "total": done, "passed": ok,
            "failed": len(failed_names), "skipped": skipped, "failures": [{"name": n} for n in failed_names[:40]],
            "unfinished": unfinished, "error": error_line(log[-4000:]) if "(exit status" in log else None}, None


def sanitizer_reports(text):
    """What a compute-sanitizer run printed: the numbers of its last ERROR SUMMARY and RACECHECK
    SUMMARY lines (None where absent: a run killed or never started) and its first message, a report or
    an error of the tool itself. The tool's lines start with its prefix, '=========' by default."""
    text = text or ""
    out = {"errors": None, "hazards": None, "first": None}
    m = re.findall(r"^=+ ERROR SUMMARY: (\d+) error", text, re.M)
    if m:
        out["errors"] = int(m[-1])
    m = re.findall(r"^=+ RACECHECK SUMMARY: (\d+) hazard", text, re.M)
    if m:
        out["hazards"] = int(m[-1])
    for line in text.splitlines():
        m = re.match(r"=+ (\S.*)$", line)
        if m and not re.match(r"COMPUTE-SANITIZER|(ERROR|RACECHECK) SUMMARY", m.group(1)):
            out["first"] = m.group(1).strip()[:300]
            break
    return out


def find_gemm_records(obj, out):
    if isinstance(obj, dict):
        if all(k in obj for k in ("m", "n", "k")):
            out.append(obj)
        else:
            for v in obj.values():
                find_gemm_records(v, out)
    elif isinstance(obj, list):
        for v in obj:
            find_gemm_records(v, out)


def norm_dtype(s):
    s = str(s or "").lower()
    if "bf16" in s or "bfloat16" in s:
        return "bf16"
    if "fp16" in s or "half" in s or "float16" in s or s == "f16":
        return "fp16"
    if "tf32" in s:
        return "tf32"
    if "fp32" in s or "float32" in s or s in ("float", "f32"):
        return "fp32"
    return s or "?"


def gemm_tflops(r):
    for key in ("tflops", "tflop_s", "tflops_per_s", "TFLOPs", "tflop_per_s"):
        if isinstance(r.get(key), (int, float)):
            return float(r[key])
    flops = 2.0 * float(r["m"]) * float(r["n"]) * float(r["k"])
    for key, scale in (("ms", 1e-3), ("time_ms", 1e-3), ("ms_median", 1e-3), ("median_ms", 1e-3), ("us", 1e-6),
                       ("time_us", 1e-6), ("median_us", 1e-6)):
        if isinstance(r.get(key), (int, float)) and r[key] > 0:
            return flops / (r[key] * scale) / 1e12
    if isinstance(r.get("gflops"), (int, float)):
        return r["gflops"] / 1e3
    return None


def gemm_headline(records):
    """Per dtype: the 8192^3 square rate and the other shapes' aggregate (total FLOPs / total time)."""
    out = {}
    for r in records:
        try:
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        except (TypeError, ValueError):
            continue
        tf = gemm_tflops(r)
        if tf is None or tf <= 0:
            continue
        d = norm_dtype(r.get("dtype") or r.get("precision") or r.get("type") or r.get("compute"))
        e = out.setdefault(d, {"flops": 0.0, "seconds": 0.0, "shapes": 0})
        flops = 2.0 * m * n * k
        if m == n == k and m >= 4096:
            e["square_tflops"] = max(e.get("square_tflops", 0.0), tf)
            e["square_size"] = m
        else:
            e["flops"] += flops
            e["seconds"] += flops / (tf * 1e12)
            e["shapes"] += 1
    for d, e in out.items():
        if e["seconds"] > 0:
            e["shapes_tflops"] = e["flops"] / e["seconds"] / 1e12
        e.pop("flops")
        e.pop("seconds")
    return out


def mixtrain_gpt_run(work, prec):
    out = read_text(os.path.join(work, "mixtrain_gpt_%s.out" % prec))
    err = read_text(os.path.join(work, "mixtrain_gpt_%s.err" % prec), limit=1500)
    objs = json_objects(out)
    if not objs:
        if out is None and err is None:
            return None
        return {"precision": prec, "status": "error", "error": ((err or "") + (out or ""))[-1200:].strip()}
    j = dict(objs[-1])
    j.setdefault("precision", prec)
    j["status"] = "ok"
    T = j.get("context") or j.get("seq_len") or j.get("sequence_length") or 1024
    if isinstance(j.get("tokens_per_sec"), (int, float)):
        j["tokens_per_s"] = j["tokens_per_sec"]
    elif isinstance(j.get("samples_per_sec"), (int, float)):
        j["tokens_per_s"] = j["samples_per_sec"] * T
    if isinstance(j.get("gflops"), (int, float)):
        j["tflops"] = j["gflops"] / 1e3
    peak = j.get("device_peak_bytes", j.get("peak_bytes"))
    if isinstance(peak, (int, float)):
        j["peak_gib"] = peak / GIB
    return j


def fmt(v, spec="%.1f", none="-"):
    return none if v is None else spec % v


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def cmd_summary(a):
    work, outdir = a.work, a.out
    phases = read_phases(work)
    env = {}
    try:
        with open(os.path.join(outdir, "env.json")) as f:
            env = json.load(f)
    except (OSError, ValueError):
        pass
    gpu = bool(env.get("gpu"))

    # tests
    tests = {}
    reports = {}
    for key, label in (("cuda", "Cuda*:CachingAllocator* (CPU)"),
                       ("placement", "*Placement* on MIXTRAIN_PLACEMENT_DEVICE=cuda"),
                       ("checked", "checked suites on MIXTRAIN_TEST_DEVICE=cuda"),
                       ("nccl", "mixtrain_nccl_smoke: NCCL in a world of one GPU")):
        counts, rep = gtest_counts(os.path.join(work, "gtest_%s.json" % key), os.path.join(work, "tests_%s.log" % key))
        if counts is not None:
            counts["filter"] = label
            tests[key] = counts
        reports[key] = rep
    # the CUDA tests under compute-sanitizer
    sanitizer = {}
    for tool in SANITIZER_TOOLS:
        log_path = os.path.join(work, "san_%s.log" % tool)
        text = read_text(log_path)
        if text is None:
            continue
        counts, rep = gtest_counts(os.path.join(work, "gtest_san_%s.json" % tool), log_path)
        entry = sanitizer_reports(text)
        entry["tests"] = counts
        sanitizer[tool] = entry
        reports["sanitizer_" + tool] = rep
    if any(v is not None for v in reports.values()):
        with open(os.path.join(outdir, "tests.json"), "w") as f:
            json.dump(reports, f)

    # GEMMs
    mt_gemm_objs = json_objects(read_text(os.path.join(work, "mixtrain_gemm.out")))
    mt_gemm_records = []
    find_gemm_records(mt_gemm_objs, mt_gemm_records)
    mt_gemm = gemm_headline(mt_gemm_records)
    torch_gemm_objs = json_objects(read_text(os.path.join(work, "torch_gemm.out")))
    torch_gemm_records = []
    find_gemm_records(torch_gemm_objs, torch_gemm_records)
    th_gemm = gemm_headline(torch_gemm_records)

    # GPT-small
    mt_gpt = {}
    for prec in ("fp32", "bf16", "fp16"):
        r = mixtrain_gpt_run(work, prec)
        if r is not None:
            mt_gpt[prec] = r
    th_runs = {"eager": {}, "compile": {}}
    for fname in ("torch_eager.out", "torch_compile.out"):
        for j in json_objects(read_text(os.path.join(work, fname))):
            th_runs.setdefault(j.get("mode", "eager"), {})[j.get("precision", "?")] = j

    with open(os.path.join(outdir, "bench.json"), "w") as f:
        json.dump({"cuda_gemm_bench": mt_gemm_objs, "cuda_gemm_headline": mt_gemm, "gpt": mt_gpt}, f, indent=1)
    with open(os.path.join(outdir, "torch.json"), "w") as f:
        json.dump({"gemm": torch_gemm_objs, "gemm_headline": th_gemm, "gpt": th_runs}, f, indent=1)

    # targets
    def step(runs, p):
        r = runs.get(p) or {}
        return r.get("step_ms_median") if r.get("status", "ok") == "ok" else None

    def peak(runs, p):
        r = runs.get(p) or {}
        v = r.get("device_peak_bytes", r.get("peak_bytes"))
        return v if r.get("status", "ok") == "ok" else None

    mt_bf16_sq = (mt_gemm.get("bf16") or {}).get("square_tflops")
    mt_bf16_shapes = (mt_gemm.get("bf16") or {}).get("shapes_tflops")
    targets = [
        {"name": "bf16 AMP step >= 2.5x faster than mixtrain fp32", "value": ratio(step(mt_gpt, "fp32"), step(mt_gpt, "bf16")),
         "threshold": 2.5, "op": ">=", "unit": "x"},
        {"name": "mixtrain bf16 step faster than torch eager bf16 autocast",
         "value": ratio(step(th_runs["eager"], "bf16"), step(mt_gpt, "bf16")), "threshold": 1.0, "op": ">", "unit": "x"},
        {"name": "mixtrain bf16 GEMM 8192^3 >= 60% of 790 TFLOP/s",
         "value": None if mt_bf16_sq is None else 100.0 * mt_bf16_sq / PEAK, "threshold": 60.0, "op": ">=", "unit": "%"},
        {"name": "mixtrain bf16 GEMMs, GPT shapes (total) >= 60% of 790",
         "value": None if mt_bf16_shapes is None else 100.0 * mt_bf16_shapes / PEAK, "threshold": 60.0, "op": ">=",
         "unit": "%"},
        {"name": "mixtrain bf16 peak memory <= 0.6x fp32 peak", "value": ratio(peak(mt_gpt, "bf16"), peak(mt_gpt, "fp32")),
         "threshold": 0.6, "op": "<=", "unit": "x"},
    ]
    for t in targets:
        v = t["value"]
        if v is None:
            t["pass"] = None
        else:
            t["pass"] = {">=": v >= t["threshold"], ">": v > t["threshold"], "<=": v <= t["threshold"]}[t["op"]]
    info = {
        "mixtrain fp16 vs torch eager fp16 (torch step / mixtrain step)": ratio(step(th_runs["eager"], "fp16"), step(mt_gpt, "fp16")),
        "torch eager bf16 speed-up over its fp32": ratio(step(th_runs["eager"], "fp32"), step(th_runs["eager"], "bf16")),
        "torch eager bf16 peak / fp32 peak": ratio(peak(th_runs["eager"], "bf16"), peak(th_runs["eager"], "fp32")),
        "mixtrain bf16 vs torch compile bf16 (torch step / mixtrain step)": ratio(step(th_runs["compile"], "bf16"), step(mt_gpt, "bf16")),
        "torch bf16 GEMM 8192^3 % of 790": None if (th_gemm.get("bf16") or {}).get("square_tflops") is None
        else 100.0 * th_gemm["bf16"]["square_tflops"] / PEAK,
        "torch bf16 GEMMs GPT shapes % of 790": None if (th_gemm.get("bf16") or {}).get("shapes_tflops") is None
        else 100.0 * th_gemm["bf16"]["shapes_tflops"] / PEAK,
        "mixtrain bf16 host waits per step (loss, index checks, inf check)":
            ((mt_gpt.get("bf16") or {}).get("host_waits_per_step") or {}).get("total"),
    }

    # phase headlines
    heads = {}
    tq = env.get("torch") or {}
    heads["inventory"] = "%s; torch %s (CUDA %s, cuDNN %s); nvcc %s" % (
        (env.get("nvidia_smi_query") or {}).get("out", "").splitlines()[0] if gpu else "no GPU",
        tq.get("version"), tq.get("cuda"), tq.get("cudnn"), nvcc_version(env))
    if "build" in phases and phases["build"]["status"] not in ("ok", "skipped", "no-gpu"):
        heads["build"] = first_error(read_text(os.path.join(outdir, "build.log")))
    parts = []
    for key, label in (("cuda", "Cuda*"), ("placement", "placement@cuda"), ("checked", "checked@cuda")):
        c = tests.get(key)
        if c and c["total"] == 0:
            parts.append("%s: no tests ran%s" % (label, " (%s)" % c["error"][:100] if c.get("error") else ""))
        elif c:
            parts.append("%s %d/%d passed, %d failed, %d skipped%s" % (label, c["passed"], c["total"], c["failed"],
                                                                      c["skipped"], " (unfinished: %s)" % c["unfinished"] if c.get("unfinished") else ""))
    heads["tests"] = "; ".join(parts)
    c = tests.get("nccl")
    if c:
        heads["nccl"] = "NcclSmoke %d/%d passed, %d failed, %d skipped%s" % (
            c["passed"], c["total"], c["failed"], c["skipped"],
            " (unfinished: %s)" % c["unfinished"] if c.get("unfinished") else "")
    for tool, e in sanitizer.items():
        sp = []
        c = e.get("tests")
        if c and c["total"]:
            sp.append("%d/%d tests passed, %d failed%s" % (c["passed"], c["total"], c["failed"],
                                                          " (unfinished: %s)" % c["unfinished"] if c.get("unfinished") else ""))
        elif c is not None:
            sp.append("no tests ran")
        if e["errors"] is not None:
            sp.append("%d error%s" % (e["errors"], "" if e["errors"] == 1 else "s"))
        if e["hazards"] is not None:
            sp.append("%d hazard%s" % (e["hazards"], "" if e["hazards"] == 1 else "s"))
        if e["errors"] is None and e["hazards"] is None:
            sp.append("no summary line")
        if e["first"]:
            sp.append("first: " + e["first"])
        heads[tool] = "; ".join(sp)
    gparts = []
    for label, g in (("mixtrain", mt_gemm), ("torch", th_gemm)):
        b = g.get("bf16") or {}
        if b.get("square_tflops") is not None:
            gparts.append("%s bf16 8192^3 %.0f TF/s (%.0f%%)" % (label, b["square_tflops"], 100 * b["square_tflops"] / PEAK))
        if b.get("shapes_tflops") is not None:
            gparts.append("%s bf16 GPT shapes %.0f TF/s (%.0f%%)" % (label, b["shapes_tflops"], 100 * b["shapes_tflops"] / PEAK))
    heads["gemm"] = "; ".join(gparts)

    def gpt_head(runs):
        ps = []
        for p in ("fp32", "bf16", "fp16"):
            r = runs.get(p)
            if not r:
                continue
            if r.get("status", "ok") != "ok":
                ps.append("%s %s" % (p, r.get("status")))
            else:
                ps.append("%s %.1f ms" % (p, r["step_ms_median"]))
        return ", ".join(ps)

    heads["mixtrain_gpt"] = gpt_head(mt_gpt)
    if not heads["mixtrain_gpt"] and mt_gpt:
        heads["mixtrain_gpt"] = "error"
    errs = [r.get("error", "") for r in mt_gpt.values() if r.get("status") == "error"]
    if errs:
        heads["mixtrain_gpt"] += (" | " if heads["mixtrain_gpt"] else "") + error_line(errs[0])[:120]
    heads["torch_eager"] = gpt_head(th_runs["eager"])
    heads["torch_compile"] = gpt_head(th_runs["compile"])

    for name, ph in phases.items():
        ph["headline"] = heads.get(name, "") or ph.get("note", "")
    phases.setdefault("inventory", {})["gpu"] = gpu
    if "tests" in phases:
        phases["tests"]["counts"] = tests
    if "nccl" in phases and tests.get("nccl"):
        phases["nccl"]["counts"] = tests["nccl"]

    total = sum(p.get("seconds") or 0 for p in phases.values())
    summary = {
        "schema": "mixtrain-gpu-check/1",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": gpu,
        "budget_s": a.budget,
        "phases_total_s": round(total, 1),
        "phases": phases,
        "tests": tests,
        "sanitizer": sanitizer,
        "gemm": {"mixtrain": mt_gemm, "torch": th_gemm, "peak_ref_tflops": PEAK},
        "gpt_small": {"mixtrain": {p: slim(r) for p, r in mt_gpt.items()},
                      "torch_eager": {p: slim(r) for p, r in th_runs["eager"].items()},
                      "torch_compile": {p: slim(r) for p, r in th_runs["compile"].items()}},
        "targets": targets,
        "info": info,
    }
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if not a.quiet:
        print_table(summary, gpu)
    return 0


def slim(r):
    keys = ("status", "error", "reason", "step_ms_median", "tokens_per_s", "tflops", "tflops_causal", "pct_of_790",
            "peak_bytes", "device_peak_bytes", "peak_gib", "batch_size", "compile_s", "samples_per_sec", "gflops",
            "optimizer", "flops_formula", "host_waits_per_step")
    return {k: r[k] for k in keys if k in r}


def error_line(text):
    """The most telling line of a failed command's output: the first that names an error."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("+ ")]
    for pattern in (r"what\(\)", r"error|Error|ERROR|unknown|not found|Segmentation|Aborted|terminate"):
        for ln in lines:
            if re.search(pattern, ln):
                return ln
    return lines[-1] if lines else ""


def first_error(log):
    if not log:
        return "no build log"
    for pat in (r"^CMake Error.*$", r"^FAILED: .*$", r"^.*error: .*$", r"^ninja: build stopped.*$"):
        m = re.search(pat, log, re.M)
        if m:
            return m.group(0)[:200]
    return log.strip().splitlines()[-1][:200] if log.strip() else ""


def print_table(s, gpu):
    print()
    print("=== mixtrain GPU check%s ===" % ("" if gpu else " (no GPU on this machine)"))
    print("%-14s %-9s %7s  %s" % ("phase", "status", "seconds", "headline"))
    phases = s["phases"]
    for name in list(PHASE_ORDER) + [n for n in phases if n not in PHASE_ORDER]:
        p = phases.get(name)
        if not p or "status" not in p:
            continue
        status = "no GPU" if p["status"] == "no-gpu" else p["status"]
        head = p.get("headline") or ""
        print("%-14s %-9s %7s  %s" % (name, status, fmt(p.get("seconds")), head[:150]))

    failed = [f["name"] for c in s["tests"].values() for f in c.get("failures", [])]
    if failed:
        print("failed tests (%d%s): %s" % (len(failed), "+" if len(failed) >= 40 else "", ", ".join(failed[:12])))

    g = s["gpt_small"]
    rows = []
    for impl in ("mixtrain", "torch_eager", "torch_compile"):
        for p in ("fp32", "bf16", "fp16"):
            r = g[impl].get(p)
            if r:
                rows.append((impl, p, r))
    if rows:
        print()
        print("GPT-small training step (median)")
        print("%-14s %-5s %-8s %9s %10s %8s %6s %9s" % ("impl", "prec", "status", "step ms", "tok/s", "TFLOP/s", "%790", "peak GiB"))
        for impl, p, r in rows:
            print("%-14s %-5s %-8s %9s %10s %8s %6s %9s" % (
                impl, p, r.get("status", "ok")[:8], fmt(r.get("step_ms_median"), "%.2f"), fmt(r.get("tokens_per_s"), "%.0f"),
                fmt(r.get("tflops")), fmt(None if r.get("tflops") is None else 100 * r["tflops"] / PEAK),
                fmt(r.get("peak_gib"), "%.2f")))
    print()
    print("Targets")
    for t in s["targets"]:
        v = t["value"]
        verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        value = fmt(v, "%.2fx" if t["unit"] == "x" else "%.1f%%")
        print("  %-58s %9s  (%s %s%s)  %s" % (t["name"], value, t["op"], t["threshold"], t["unit"], verdict))
    shown = [(k, v) for k, v in s["info"].items() if v is not None]
    if shown:
        print("Also")
        for k, v in shown:
            print("  %-66s %8.2f" % (k, v))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env")
    e.add_argument("--out", required=True)
    e.add_argument("--nvcc", default="")
    e.add_argument("--nvidia-smi", default="")
    e.add_argument("--hints", default="")
    c = sub.add_parser("checked-filter")
    c.add_argument("--cuda", action="store_true", help="exclude MIXTRAIN_CUDA_SKIPPED_SUITES")
    c.add_argument("cmakelists")
    s = sub.add_parser("summary")
    s.add_argument("--work", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--budget", type=float, default=None)
    s.add_argument("--quiet", action="store_true", help="write the files only, print no table")
    a = p.parse_args()
    return {"env": cmd_env, "checked-filter": cmd_checked_filter, "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
