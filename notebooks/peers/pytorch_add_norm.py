#!/usr/bin/env python3
"""The PyTorch peer of chapter 06: the residual add and the add + LayerNorm / RMSNorm pair as
a user writes them in PyTorch, eager and under torch.compile, timed by the same Timer as
pytorch_peers.py (the wb::Bench rules in Python) over the chapter bench's shapes, written as
a results file (schema workbook-results/1, impl "pytorch").

    python3 notebooks/peers/pytorch_add_norm.py [--out FILE] [--quick] [--no-compile]

Variants, per shape (fp32; bytes counted as the chapter counts them):
  pytorch_add                  r = x + delta                              (12 B/element)
  pytorch_add_sync_per_call    the same, torch.cuda.synchronize() after each call, host-timed
  pytorch_add_norm             r = x + delta; h = F.layer_norm(r) / F.rms_norm(r)  (16 B/element)
  pytorch_add_norm_compiled    the same function under torch.compile (one fused Triton kernel)
Exit status: 0 written; 77 without torch or a CUDA device; 1 on a failure.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_peers as peers  # noqa: E402  (the shared Timer, statistics and environment)

SHAPES = [(4096, 2560, "layernorm"), (8192, 768, "layernorm"), (4096, 2560, "rmsnorm")]
EPS = 1e-5


def shape_name(rows, dim, norm):
    return f"{rows}x{dim}_{norm}_fp32"  # the names bench_06 uses


def host_timed(torch, fn, quick):
    """Median of host-clock samples of fn() + synchronize (what a per-call sync costs)."""
    for _ in range(5):
        fn()
        torch.cuda.synchronize()
    samples = []
    t_end = time.perf_counter() + (0.2 if quick else 1.0)
    while len(samples) < 20 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
        if len(samples) >= 2000:
            break
    return samples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=peers.REPO_ROOT / "results" / "pytorch_add_norm.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("pytorch_add_norm: skipped: PyTorch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("pytorch_add_norm: skipped: no CUDA device", file=sys.stderr)
        return 77
    F = torch.nn.functional
    timer = peers.Timer(torch, args.quick)
    copy_gbps = peers.measure_copy_gbps(torch, timer)
    entries = []
    for k, (rows, dim, norm) in enumerate(SHAPES):
        g = torch.Generator(device="cuda")
        g.manual_seed(600 + k)
        x = torch.randn(rows, dim, device="cuda", generator=g) * 2.0
        delta = torch.randn(rows, dim, device="cuda", generator=g)
        w = torch.rand(dim, device="cuda", generator=g) + 0.5
        b = torch.rand(dim, device="cuda", generator=g) - 0.5

        def add():
            return x + delta

        def add_norm():
            r = x + delta
            if norm == "layernorm":
                return r, F.layer_norm(r, (dim,), w, b, EPS)
            return r, F.rms_norm(r, (dim,), w, EPS)

        variants = {"pytorch_add": (add, 12.0), "pytorch_add_norm": (add_norm, 16.0)}
        if not args.no_compile:
            variants["pytorch_add_norm_compiled"] = (torch.compile(add_norm), 16.0)
        # Check every variant once against float64 before timing it.
        rd = x.double() + delta.double()
        if norm == "layernorm":
            hd = F.layer_norm(rd, (dim,), w.double(), b.double(), EPS)
        else:
            hd = rd / torch.sqrt((rd * rd).mean(-1, keepdim=True) + EPS) * w.double()
        for name, (fn, _) in variants.items():
            out = fn()
            h = out[1] if isinstance(out, tuple) else None
            r = out[0] if isinstance(out, tuple) else out
            if not torch.allclose(r.double(), rd, atol=1e-6, rtol=1e-6) or (
                    h is not None and not torch.allclose(h.double(), hd, atol=1e-4, rtol=1e-4)):
                raise SystemExit(f"pytorch_add_norm: {name} {rows}x{dim} disagrees with float64")
        shape = shape_name(rows, dim, norm)
        params = {"rows": rows, "dim": dim, "norm": norm, "dtype": "float32"}
        for name, (fn, bytes_per_element) in variants.items():
            samples, converged = timer.run(fn, cold=True)
            e = {"variant": name, "impl": "pytorch", "shape": shape, "op": "add_norm", "params": params}
            e.update(peers.stats_entry(samples, converged, bytes_per_element * rows * dim, 0.0,
                                       copy_gbps, "cold"))
            entries.append(e)
            print(f"{shape:28s} {name:28s} {e['median_us']:9.2f} us", file=sys.stderr)
        samples = host_timed(torch, add, args.quick)
        e = {"variant": "pytorch_add_sync_per_call", "impl": "pytorch", "shape": shape, "op": "add_norm",
             "params": params}
        e.update(peers.stats_entry(samples, True, 12.0 * rows * dim, 0.0, copy_gbps, "hot"))
        e["clock"] = "host"
        entries.append(e)
        print(f"{shape:28s} {'pytorch_add_sync_per_call':28s} {e['median_us']:9.2f} us", file=sys.stderr)

    doc = {"schema": peers.SCHEMA_ID, "chapter": "pytorch_add_norm", "build": "peer",
           "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "environment": peers.environment(torch, copy_gbps, timer.l2_bytes),
           "peer": {"framework": f"torch {torch.__version__}", "script": "notebooks/peers/pytorch_add_norm.py",
                    "quick": args.quick},
           "results": entries}
    peers.write_atomic(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"pytorch_add_norm: wrote {args.out} ({len(entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
