#!/usr/bin/env python3
"""The PyTorch peer of chapter 07: the sampler a framework user writes (temperature ->
softmax -> sort -> cumsum -> mask -> multinomial -> gather, plus the chosen token's
confidence), timed the way the workbook times its own samplers, over the chapter bench's
shapes and cases, written as a results file (schema workbook-results/1, impl "pytorch")
that notebooks/05_sampler.ipynb draws beside the chapter's steps.

    python3 notebooks/peers/pytorch_sampler.py [--out FILE] [--quick]
    python3 notebooks/peers/pytorch_sampler.py --dry-run      (print the sweep; no GPU)

Variants (every entry has "shape" ROWSxVOCAB and "sampling" as in tests/07_gpu_sampler/bench.cu):
  pytorch_sort    the common framework path (HF transformers' top-k/top-p warpers, most
                  diffusion-LM decoders): probs = softmax(logits / T); sort descending;
                  cumsum; mask what top-k and top-p drop; renormalize; torch.multinomial;
                  gather the token id back through the sort's indices; its probability.
  pytorch_greedy  argmax and the softmax probability of it (T = 1): greedy + confidence.
Cases: topk50_topp0.9 (T 1, top-k 50, top-p 0.9), topp0.9 (top-p alone), greedy.

Timing (the rules of wb::Bench, in Python; shared with pytorch_peers.py, whose Timer this
reuses): an untimed first call, warmup, L2 flushed before each sample outside the timed
region, CUDA events around the op, samples until the median is stable. After timing, the
draws of fresh logits are checked: every token lies in the exact top-k/top-p set computed
in float64 (the documented band at the top-p boundary excepted) and its confidence matches.

Exit status: 0 written; 77 without torch or a CUDA device; 1 on a failure (message says what).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_peers as pp  # noqa: E402  (the shared timer, environment and writer)

REPO_ROOT = Path(__file__).resolve().parents[2]

# The chapter bench's sweep (tests/07_gpu_sampler/bench.cu), same names.
CASES = {
    "topk50_topp0.9": dict(temperature=1.0, top_k=50, top_p=0.9),
    "topp0.9": dict(temperature=1.0, top_k=0, top_p=0.9),
    "greedy": dict(temperature=0.0, top_k=0, top_p=1.0),
}
SWEEP = [((1, 32000), ["topk50_topp0.9", "greedy"]),
         ((16, 151936), ["topk50_topp0.9", "topp0.9", "greedy"]),
         ((64, 32000), ["topk50_topp0.9", "greedy"]),
         ((256, 151936), ["topk50_topp0.9", "topp0.9", "greedy"])]
QUICK_SWEEP = [((16, 151936), ["topk50_topp0.9", "greedy"]), ((256, 151936), ["topp0.9"])]


def sort_sampler(torch, logits, temperature, top_k, top_p, generator):
    """The framework path. Returns (tokens, confidence)."""
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, sorted_ids = torch.sort(probs, dim=-1, descending=True)
    keep = torch.ones_like(sorted_probs, dtype=torch.bool)
    if top_k > 0:
        keep[:, top_k:] = False
    if top_p < 1.0:
        kept = sorted_probs * keep
        cumulative = torch.cumsum(kept, dim=-1) / kept.sum(dim=-1, keepdim=True)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        keep &= (cumulative - kept / kept.sum(dim=-1, keepdim=True)) < top_p
    filtered = sorted_probs * keep
    pick = torch.multinomial(filtered / filtered.sum(dim=-1, keepdim=True), 1, generator=generator)
    tokens = torch.gather(sorted_ids, -1, pick).squeeze(-1)
    confidence = torch.gather(sorted_probs, -1, pick).squeeze(-1)
    return tokens, confidence


def greedy_sampler(torch, logits):
    probs = torch.softmax(logits, dim=-1)
    confidence, tokens = probs.max(dim=-1)
    return tokens, confidence


def check(torch, logits, tokens, confidence, case, where):
    """Tokens in the exact kept set (float64), confidence = p(token); a few rows."""
    c = CASES[case]
    rows = min(logits.shape[0], 16)
    x = logits[:rows].double()
    t = c["temperature"] if c["temperature"] > 0 else 1.0
    p = torch.softmax(x / t, dim=-1)
    for r in range(rows):
        tok = int(tokens[r])
        want = float(p[r, tok])
        if abs(float(confidence[r]) - want) > 1e-9 + 1e-3 * want:
            raise SystemExit(f"pytorch_sampler: {where} row {r}: confidence {float(confidence[r])}, "
                             f"expected {want}")
        if case == "greedy":
            if tok != int(torch.argmax(x[r])):
                raise SystemExit(f"pytorch_sampler: {where} row {r}: greedy token {tok} is not the argmax")
            continue
        sp, si = torch.sort(p[r], descending=True, stable=True)
        k = c["top_k"] if 0 < c["top_k"] < sp.numel() else sp.numel()
        sp, si = sp[:k], si[:k]
        cum = torch.cumsum(sp, 0) / sp.sum()
        n = int(torch.searchsorted(cum, torch.tensor([c["top_p"]], dtype=cum.dtype, device=cum.device))) + 1
        n = min(n + 1, k)  # the documented band: the token right after the cut may go either way
        if tok not in set(si[:n].tolist()):
            raise SystemExit(f"pytorch_sampler: {where} row {r}: token {tok} is outside the kept set")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="default: results/pytorch_sampler.json")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and samples (a smoke run)")
    ap.add_argument("--dry-run", action="store_true", help="print the sweep and exit (no GPU needed)")
    args = ap.parse_args(argv)
    sweep = QUICK_SWEEP if args.quick else SWEEP
    out = args.out or REPO_ROOT / "results" / "pytorch_sampler.json"
    if args.dry_run:
        for (rows, vocab), cases in sweep:
            for case in cases:
                print(f"{rows}x{vocab} {case}")
        return 0
    try:
        import torch
    except ImportError:
        print("pytorch_sampler: skipped: PyTorch is not installed (pip install torch)", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("pytorch_sampler: skipped: no CUDA device", file=sys.stderr)
        return 77

    timer = pp.Timer(torch, args.quick)
    copy_gbps = pp.measure_copy_gbps(torch, timer)
    print(f"pytorch_sampler: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"measured copy ceiling {copy_gbps:.0f} GB/s", file=sys.stderr)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(2024)
    entries = []
    for k, ((rows, vocab), cases) in enumerate(sweep, start=1):
        logits = torch.randn(rows, vocab, device="cuda", generator=generator) * 4.0
        nbytes = logits.numel() * logits.element_size()
        for case in cases:
            c = CASES[case]
            if case == "greedy":
                variant = "pytorch_greedy"
                fn = lambda x=logits: greedy_sampler(torch, x)  # noqa: E731
            else:
                variant = "pytorch_sort"
                fn = lambda x=logits, c=c: sort_sampler(torch, x, c["temperature"], c["top_k"],  # noqa: E731
                                                        c["top_p"], generator)
            samples, converged = timer.run(fn, cold=True)
            e = {"variant": variant, "impl": "pytorch", "shape": f"{rows}x{vocab}", "sampling": case, "op": case,
                 "rows": rows, "vocab": vocab, "params": dict(c), "d2h_bytes_per_row": 0}
            e.update(pp.stats_entry(samples, converged, nbytes, 0, copy_gbps, "cold"))
            fresh = torch.randn(rows, vocab, device="cuda", generator=generator) * 4.0
            if case == "greedy":
                tokens, confidence = greedy_sampler(torch, fresh)
            else:
                tokens, confidence = sort_sampler(torch, fresh, c["temperature"], c["top_k"], c["top_p"],
                                                  generator)
            torch.cuda.synchronize()
            check(torch, fresh, tokens.cpu(), confidence.cpu(), case, f"{variant} {rows}x{vocab} {case}")
            entries.append(e)
            print(f"[{k}/{len(sweep)}] {rows}x{vocab} {case:16s} {variant:15s} {e['median_us']:10.2f} us",
                  file=sys.stderr)
        del logits

    # A peer file of its own (the schema allows pytorch_<name>): the sampler peer.
    doc = {"schema": pp.SCHEMA_ID, "chapter": "pytorch_sampler", "build": "peer",
           "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "environment": pp.environment(torch, copy_gbps, timer.l2_bytes),
           "peer": {"framework": f"torch {torch.__version__}", "script": "notebooks/peers/pytorch_sampler.py",
                    "sweep": "the chapter 07 bench's shapes and cases", "quick": args.quick},
           "results": entries}
    pp.self_check(doc, out)
    pp.write_atomic(out, json.dumps(doc, indent=1) + "\n")
    print(f"pytorch_sampler: wrote {out} ({len(entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
