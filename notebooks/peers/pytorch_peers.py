#!/usr/bin/env python3
"""The PyTorch peer: what a user would reach for instead of writing the softmax and GELU
kernels of chapters 04 and 05, timed the way the workbook's harness times its own kernels,
over the same sizes, written as a results file (schema workbook-results/1, impl "pytorch")
that the fusion notebook draws beside the chapter's unfused and fused kernels.

    python3 notebooks/peers/pytorch_peers.py [--sweep-from DIR] [--out FILE] [--quick]
    python3 notebooks/peers/pytorch_peers.py --sweep-from DIR --dry-run   (print the sweep; no GPU)

The sweep: the shapes of the "fused"/"unfused" entries in DIR/04_fused_softmax-solution.json
and DIR/05_fused_gelu-solution.json (run `./workbook bench 04 05` first, on the same GPU),
so every size the chapter measured has its PyTorch peer; without them a default sweep.

How it times (the rules of wb::Bench, in Python):
  - an untimed first call, then warmup by count (3) and by time (20 ms);
  - each sample: L2 flushed as wb::flush_l2 does, outside the timed region: a buffer twice
    its size is written, then read back, so no dirty line of the flush is left for the timed
    op to write back (WB_L2_FLUSH=write: the write-only flush of nvbench and do_bench); CUDA events recorded on the current stream around
    the op; the stop event synchronized;
  - samples until the median is stable (>= 20 samples and 50 ms, relative standard error of
    the median below 0.5%) or a cap (2000 samples, 3 s);
  - median, min, max, mean, quartiles, noise (1.4826 MAD / median), GB/s and % of the copy
    ceiling measured here (device-to-device copy, read + write bytes);
  - the output is checked against a float64 reference on fresh inputs after timing.
Variants: "pytorch" (torch.softmax / torch.nn.functional.gelu: one fused kernel) and
"pytorch_unfused" (the same maths as separate tensor ops, one kernel each).

Exit status: 0 written; 77 without torch or a CUDA device; 1 on a failure (message says what).
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_ID = "workbook-results/1"

# The chapter benches' own sweeps (tests/04_fused_softmax/bench.cu, tests/05_fused_gelu/bench.cu),
# named the way they name them, for when their results files are not at hand.
DEFAULT_SOFTMAX = [f"{r}x{c}" for r, c in [(16, 151936), (1, 151936), (64, 32000), (4096, 4096),
                                           (8192, 1024), (32768, 256)]]
DEFAULT_GELU = [f"2^{k}" for k in (20, 24, 26, 27)]
# The peers this script can time, by the name a chapter manifest gives in
# "plots": {"fusion": {"peer": NAME}} (docs/CONTRACTS.md): the default sweep, and whether the
# op works on rows (ROWSxCOLS) or on a flat array. A new peer adds a line here and its
# PyTorch code in make_ops()/reference()/check()/random_input().
PEERS = {"softmax": (DEFAULT_SOFTMAX, "rows"), "gelu": (DEFAULT_GELU, "flat")}


def peer_chapters(tests_dir: Path | None = None):
    """[(peer, slug)] from the chapter manifests (tests/*/chapter.json) that name a peer."""
    out = []
    for path in sorted(Path(tests_dir or REPO_ROOT / "tests").glob("*/chapter.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        peer = ((doc.get("plots") or {}).get("fusion") or {}).get("peer")
        if peer is None:
            continue
        if peer not in PEERS:
            raise SystemExit(f"pytorch_peers: {path} names the peer {peer!r}, which this script does not "
                             f"know (known: {', '.join(sorted(PEERS))})")
        out.append((peer, doc["slug"]))
    if not out:  # a copy of the notebooks without the tests: the two chapters that have peers
        out = [("softmax", "04_fused_softmax"), ("gelu", "05_fused_gelu")]
    return out


# --------------------------------------------------------------------------------------
# The sweep: the chapter benches' shapes
# --------------------------------------------------------------------------------------

def _chapter_points(path: Path):
    """(shape string, params, cache, flops) of the fused/unfused entries of a chapter file."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("schema") != SCHEMA_ID:
        raise SystemExit(f"pytorch_peers: {path}: not a workbook results file (schema "
                         f"{doc.get('schema')!r})")
    seen = {}
    for e in doc.get("results", []):
        if e.get("variant") in ("fused", "unfused", "copy") and "samples" in e:
            # The size as the bench states it: top-level rows/cols or n (04, 05), or "params".
            params = dict(e.get("params", {}))
            params.update({k: e[k] for k in ("rows", "cols", "n", "dtype", "approximate") if k in e})
            if e["shape"] not in seen or e["variant"] == "fused":
                seen[e["shape"]] = (e["shape"], params, e.get("cache", "cold"),
                                    e.get("flops", 0) if e["variant"] != "copy" else 0)
    return list(seen.values())


def _dims(shape: str, params: dict):
    if "rows" in params and "cols" in params:
        return int(params["rows"]), int(params["cols"])
    for k in ("n", "numel", "elements"):
        if k in params:
            return (int(params[k]),)
    if shape.startswith("2^") and shape[2:].isdigit():
        return (1 << int(shape[2:]),)
    try:
        return tuple(int(s) for s in shape.split("x"))
    except ValueError:
        raise SystemExit(f"pytorch_peers: cannot read the size of shape {shape!r} "
                         "(expected ROWSxCOLS or N, or params rows/cols or n)") from None


def build_sweep(sweep_from: Path | None):
    """[(op, shape, dims, params, cache, flops)] and a sentence saying where it came from."""
    sweep, sources = [], []
    for op, slug in peer_chapters():
        default, layout = PEERS[op]
        path = sweep_from / f"{slug}-solution.json" if sweep_from else None
        if path is not None and path.is_file():
            pts = _chapter_points(path)
            sources.append(f"{op}: the shapes of {path}")
        else:
            pts = [(shape, {}, "cold", 0) for shape in default]
            why = f"{path} not found" if path is not None else "no --sweep-from"
            sources.append(f"{op}: the default sweep ({why})")
        for shape, params, cache, flops in pts:
            dims = _dims(shape, params)
            if layout == "rows" and len(dims) != 2:
                raise SystemExit(f"pytorch_peers: {op} shape {shape!r} is not ROWSxCOLS")
            sweep.append((op, shape, dims, params, cache, flops))
    return sweep, "; ".join(sources)


# --------------------------------------------------------------------------------------
# Timing (a Python mirror of wb::Bench)
# --------------------------------------------------------------------------------------

def l2_flush_method():
    """As wb::l2_flush_method(): "write+read" unless WB_L2_FLUSH=write."""
    return "write" if os.environ.get("WB_L2_FLUSH") == "write" else "write+read"


class Timer:
    def __init__(self, torch, quick: bool):
        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 64 << 20)
        self.l2_bytes = l2
        self.flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.flush_words = self.flush_buf.view(torch.int32)
        self.flush_sink = torch.empty((), dtype=torch.int64, device="cuda")
        self.flush_method = l2_flush_method()
        self.min_samples, self.min_time_ms = (10, 20.0) if quick else (20, 50.0)
        self.max_samples, self.max_time_ms = (500, 1000.0) if quick else (2000, 3000.0)
        self.noise_target = 0.005

    def flush_l2(self):
        self.flush_buf.fill_(1)  # a write of twice the L2 evicts what the last sample left
        if self.flush_method == "write+read":
            # ... and reading it back leaves L2 clean (see wb::flush_l2 in lib/include/wb/timing.hpp)
            torch = self.torch
            torch.sum(self.flush_words, dim=0, out=self.flush_sink)

    def run(self, fn, cold: bool):
        torch = self.torch
        fn()  # untimed first call
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        count = 0
        while count < 3 or (time.perf_counter() - t0) * 1e3 < 20.0:
            fn()
            torch.cuda.synchronize()
            count += 1
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        began = time.perf_counter()
        converged = False
        while True:
            if cold:
                self.flush_l2()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) * 1e3)  # ms -> us
            elapsed_ms = (time.perf_counter() - began) * 1e3
            if len(samples) >= self.min_samples and elapsed_ms >= self.min_time_ms:
                if self.relative_se(samples) < self.noise_target:
                    converged = True
                    break
            if len(samples) >= self.max_samples or elapsed_ms >= self.max_time_ms:
                break
        return samples, converged

    @staticmethod
    def mad(samples):
        med = statistics.median(samples)
        return statistics.median(abs(s - med) for s in samples), med

    @classmethod
    def relative_se(cls, samples):
        mad, med = cls.mad(samples)
        return 1.253 * 1.4826 * mad / med / math.sqrt(len(samples)) if med > 0 else math.inf


def stats_entry(samples, converged, bytes_, flops, copy_gbps, cache):
    s = sorted(samples)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0]] * 3
    mad, med = Timer.mad(s)
    gbps = bytes_ / (med * 1e3)
    return {
        "cache": cache, "clock": "device",
        "median_us": med, "min_us": s[0], "max_us": s[-1], "mean_us": statistics.fmean(s),
        "p25_us": q[0], "p75_us": q[2], "noise": 1.4826 * mad / med, "samples": len(s),
        "converged": converged, "bytes": float(bytes_), "flops": float(flops),
        "gbps": gbps, "pct_of_peak": 100 * gbps / copy_gbps, "floor_us": bytes_ / (copy_gbps * 1e3),
    }


def measure_copy_gbps(torch, timer) -> float:
    """Device copy bandwidth, read + write bytes, as the harness counts it (best of 3 sizes)."""
    best = 0.0
    for mib in (256, 1024, 2048):
        n = mib << 20
        a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(7)
        b = torch.empty_like(a)
        samples, _ = timer.run(lambda: b.copy_(a), cold=False)
        best = max(best, 2 * n / (statistics.median(samples) * 1e3))
        del a, b
    return best


# --------------------------------------------------------------------------------------
# The ops
# --------------------------------------------------------------------------------------

GELU_K = math.sqrt(2.0 / math.pi)


def make_ops(torch, op, x, approximate):
    F = torch.nn.functional
    if op == "softmax":
        def fused():
            return torch.softmax(x, dim=-1)

        def unfused():
            m = x.amax(dim=-1, keepdim=True)
            e = torch.exp(x - m)
            return e / e.sum(dim=-1, keepdim=True)
    else:
        def fused():
            return F.gelu(x, approximate=approximate)

        def unfused():
            if approximate == "tanh":
                return 0.5 * x * (1.0 + torch.tanh(GELU_K * (x + 0.044715 * x * x * x)))
            return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
    return {"pytorch": fused, "pytorch_unfused": unfused}


def reference(torch, op, x, approximate):
    xd = x.double()
    if op == "softmax":
        return torch.softmax(xd, dim=-1)
    if approximate == "tanh":
        return 0.5 * xd * (1.0 + torch.tanh(GELU_K * (xd + 0.044715 * xd ** 3)))
    return 0.5 * xd * (1.0 + torch.erf(xd / math.sqrt(2.0)))


def check(torch, op, fn_name, fn, x, approximate, where):
    got = fn().double()
    want = reference(torch, op, x, approximate)
    # (atol, rtol) per dtype: a sanity check that the peer computes the same function.
    # Softmax probabilities are tiny (1/151936 ~ 7e-6), so its atol sits far below them;
    # in 16-bit types exp(x - max) amplifies the rounding of x - max by |x - max|, hence
    # the wide rtol there.
    tol = {torch.float32: (1e-12 if op == "softmax" else 1e-6, 1e-4),
           torch.float16: (1e-7 if op == "softmax" else 1e-3, 3e-2 if op == "softmax" else 1e-2),
           torch.bfloat16: (1e-6 if op == "softmax" else 1e-2, 0.15 if op == "softmax" else 3e-2)}[x.dtype]
    bad = ~(torch.abs(got - want) <= tol[0] + tol[1] * torch.abs(want))
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        raise SystemExit(f"pytorch_peers: {fn_name} {where} disagrees with the float64 reference at "
                         f"element {i}: got {float(got.flatten()[i])}, expected {float(want.flatten()[i])}")


def random_input(torch, op, dims, dtype, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    x = torch.randn(*dims, device="cuda", dtype=torch.float32, generator=g)
    if op == "softmax":
        x = x * 4.0  # logits with a realistic spread
    return x.to(dtype)


# --------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------

def _driver_version():
    try:
        v = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"
    except OSError:
        return None


def _nvidia_smi_clocks():
    try:
        out = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=True).stdout.strip().split(",")
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, None


def _git_revision():
    if os.environ.get("WB_REVISION"):  # as .ci/gpu-run: a tree copied without its history
        return os.environ["WB_REVISION"]
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=20,
                              check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(torch, copy_gbps, l2_bytes):
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "compute_capability": f"{props.major}.{props.minor}",
           "sm_count": props.multi_processor_count, "l2_bytes": l2_bytes,
           "global_mem_bytes": props.total_memory,
           "l2_flush": l2_flush_method()}
    sm_mhz, mem_mhz = _nvidia_smi_clocks()
    if sm_mhz:
        env["sm_clock_mhz"] = sm_mhz
    if mem_mhz:
        env["mem_clock_mhz"] = mem_mhz
    bus = getattr(props, "memory_bus_width", None)
    if bus:
        env["mem_bus_bits"] = int(bus)
    driver = _driver_version()
    if driver:
        env["driver_version"] = driver
    if torch.version.cuda:
        env["runtime_version"] = torch.version.cuda
    env["ceilings"] = {"copy_gbps": copy_gbps, "l2_bytes": l2_bytes}
    env["git_revision"] = _git_revision()
    env["host"] = socket.gethostname()
    return env


# --------------------------------------------------------------------------------------

def write_atomic(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def self_check(doc, out: Path):
    """Validates the document with the notebooks' validator when jsonschema is installed."""
    sys.path.insert(0, str(REPO_ROOT / "notebooks"))
    try:
        import wbplots
        problems = wbplots.validate_doc(doc, out)
    except wbplots.ResultsError as e:  # jsonschema is not installed here
        print(f"pytorch_peers: note: output not schema-checked here ({e})", file=sys.stderr)
        return
    if problems:
        raise SystemExit("pytorch_peers: the results would be malformed:\n  " + "\n  ".join(problems))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep-from", type=Path, default=None,
                    help="results dir holding 04_fused_softmax-solution.json / 05_fused_gelu-solution.json")
    ap.add_argument("--out", type=Path, default=None, help="default: results/pytorch_peers.json")
    ap.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    ap.add_argument("--gelu", choices=["tanh", "none"], default=None,
                    help="GELU form (default: the chapter's params.approximate, else tanh)")
    ap.add_argument("--dry-run", action="store_true", help="print the sweep and exit (no GPU needed)")
    args = ap.parse_args(argv)

    sweep, sweep_source = build_sweep(args.sweep_from)
    out = args.out or REPO_ROOT / "results" / "pytorch_peers.json"
    print(f"pytorch_peers: sweep from {sweep_source}", file=sys.stderr)
    if args.dry_run:
        for op, shape, dims, params, cache, _ in sweep:
            print(f"{op:8s} {shape:>14s} {cache}")
        return 0

    try:
        import torch
    except ImportError:
        print("pytorch_peers: skipped: PyTorch is not installed (pip install torch)", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("pytorch_peers: skipped: no CUDA device", file=sys.stderr)
        return 77

    timer = Timer(torch, args.quick)
    copy_gbps = measure_copy_gbps(torch, timer)
    print(f"pytorch_peers: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"measured copy ceiling {copy_gbps:.0f} GB/s", file=sys.stderr)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    entries = []
    for k, (op, shape, dims, params, cache, flops) in enumerate(sweep, start=1):
        dtype_name = params.get("dtype", "float32")
        if dtype_name not in dtypes:
            raise SystemExit(f"pytorch_peers: {op} {shape}: unknown dtype {dtype_name!r}")
        dtype = dtypes[dtype_name]
        approximate = args.gelu or params.get("approximate", "tanh")
        x = random_input(torch, op, dims, dtype, seed=1000 + k)
        nbytes = 2 * x.numel() * x.element_size()
        base_params = dict({"rows": dims[0], "cols": dims[1]} if op == "softmax" else {"n": dims[0]},
                           dtype=dtype_name)
        if op == "gelu":
            base_params["approximate"] = approximate
        for variant, fn in make_ops(torch, op, x, approximate).items():
            samples, converged = timer.run(fn, cold=(cache == "cold"))
            e = {"variant": variant, "impl": "pytorch", "shape": shape, "op": op, "params": base_params}
            e.update(stats_entry(samples, converged, nbytes, flops, copy_gbps, cache))
            if e["median_us"] * 1.10 < e["floor_us"]:
                raise SystemExit(f"pytorch_peers: {variant} {op} {shape}: {e['median_us']:.2f} us is "
                                 f"below the copy floor {e['floor_us']:.2f} us: the timing is implausible")
            fresh = random_input(torch, op, dims, dtype, seed=5000 + k)
            check(torch, op, variant, make_ops(torch, op, fresh, approximate)[variant], fresh, approximate,
                  f"{op} {shape}")
            entries.append(e)
            print(f"[{k}/{len(sweep)}] {op:7s} {shape:>12s} {variant:16s} {e['median_us']:10.2f} us "
                  f"{e['gbps']:8.0f} GB/s ({e['pct_of_peak']:.0f}% of copy)", file=sys.stderr)
        del x

    doc = {"schema": SCHEMA_ID, "chapter": "pytorch_peers", "build": "peer",
           "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "environment": environment(torch, copy_gbps, timer.l2_bytes),
           "peer": {"framework": f"torch {torch.__version__}", "script": "notebooks/peers/pytorch_peers.py",
                    "sweep": sweep_source, "quick": args.quick},
           "results": entries}
    self_check(doc, out)
    write_atomic(out, json.dumps(doc, indent=1) + "\n")
    print(f"pytorch_peers: wrote {out} ({len(entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
