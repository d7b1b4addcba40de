#!/usr/bin/env python3
"""The PyTorch peer of chapter 08 (the capstone): the whole llama2 token loop as a PyTorch user
writes it, batch 1, fp32, greedy, with a KV cache, on the shapes the chapter bench decodes,
written as a results file (schema workbook-results/1, impl "pytorch") that
notebooks/01_transfer_ladder.ipynb and the chapter's lesson read beside the chapter's decoder.

    python3 notebooks/peers/pytorch_decode.py [--out FILE] [--quick] [--no-compile]
    python3 notebooks/peers/pytorch_decode.py --dry-run      (print the configs; no GPU)

The model: llama2.c's architecture (RMSNorm eps 1e-5, RoPE on consecutive pairs with
theta = pos * 10000^(-(i % head_size) / head_size), grouped-query attention, SwiGLU,
classifier = the token embedding unless the checkpoint says otherwise), random weights
(seeded; the speed of a forward pass does not depend on their values), on
  synthetic-110m  dim 768, hidden 2048, 12 layers, 12 heads, 12 KV heads, vocab 32000,
                  seq 1024, shared classifier (the workbook's synthetic model), 256 steps;
  stories260K     the header of $WB_DATA_DIR/stories260K.bin when it exists (7 int32s: dim,
                  hidden, layers, heads, kv_heads, vocab (negative: unshared classifier),
                  seq_len); else llama2.c's published config (dim 64, hidden 172, 5 layers,
                  8 heads, 4 KV heads, vocab 512, seq 512), and the entry says so; 256 steps.

Variants (every one from BOS, greedy; the chosen token comes back to the host every step,
as a generator that prints or stops on a token must have it, and as chapter 08's decoder
does; tokens/s = tokens timed / wall-clock time, after warmup steps):
  pytorch_eager    the plain loop: one Python call per step, attention over positions 0..pos
                   only (a slice of the cache). Already "the strong eager version": weights
                   of a layer's q/k/v (and w1/w3) concatenated into one matrix (the same
                   math, one matvec instead of three), the KV cache and the RoPE table
                   preallocated, GQA by a view (no repeat_interleave copy), inference_mode.
  pytorch_graph    the same step with static shapes (position and token in device tensors,
                   attention over the whole cache with a -inf mask past pos, the step ends
                   by writing the argmax token and advancing pos in device memory), captured
                   once as a CUDA graph and replayed per token: what chapter 08 builds.
  pytorch_compile  the static step through torch.compile (inductor fuses the elementwise
                   work; mode "max-autotune-no-cudagraphs" unless --compile-mode says
                   otherwise), then captured by hand as a CUDA graph like pytorch_graph.
                   Skipped, with a note in the file's "peer" section, if compiling fails.
Before timing, every mode's logits at the first positions are checked against the eager
loop's (same tokens fed), so the modes compute the same model.

Exit status: 0 written; 77 without torch or a CUDA device; 1 on a failure (message says what).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_peers as pp  # noqa: E402  (the shared timer, environment and writer)

EPS = 1e-5
STEPS, QUICK_STEPS = 256, 32
WARMUP_STEPS = 8
CHECK_STEPS = 8
BOS = 1

# name -> (dim, hidden, layers, heads, kv_heads, vocab, seq_len, shared classifier)
SYNTHETIC_110M = dict(dim=768, hidden=2048, layers=12, heads=12, kv_heads=12, vocab=32000, seq=1024, shared=True)
STORIES260K_DEFAULT = dict(dim=64, hidden=172, layers=5, heads=8, kv_heads=4, vocab=512, seq=512, shared=True)


def stories260k_config():
    """(config, where it came from): the real checkpoint's header when WB_DATA_DIR has it."""
    data = os.environ.get("WB_DATA_DIR", "").strip()
    path = Path(data) / "stories260K.bin" if data else None
    if path is not None and path.is_file():
        with open(path, "rb") as f:
            header = f.read(28)
        if len(header) == 28:
            dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", header)
            return (dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                         vocab=abs(vocab), seq=seq, shared=vocab > 0),
                    f"the header of {path} (random weights of that shape)")
    return dict(STORIES260K_DEFAULT), ("llama2.c's published stories260K config (WB_DATA_DIR/stories260K.bin "
                                       "not found; random weights of that shape)")


def weight_bytes_per_token(c) -> int:
    """Bytes of weights one token reads: every matrix and norm once, one embedding row, the
    classifier (as chapter 08's GpuModel::weight_bytes_per_token counts them)."""
    d, h, kv = c["dim"], c["hidden"], c["kv_heads"] * (c["dim"] // c["heads"])
    per_layer = 2 * d + d * d + 2 * d * kv + d * d + 3 * d * h
    return 4 * (d + c["layers"] * per_layer + d + c["vocab"] * d)


class Model:
    """Weights (fused q|k|v and w1|w3, as concatenated matrices), RoPE tables, KV cache."""

    def __init__(self, torch, c, seed):
        self.torch, self.c = torch, c
        d, hid, L, H, KV = c["dim"], c["hidden"], c["layers"], c["heads"], c["kv_heads"]
        hs = d // H
        self.hs, self.kv_dim, self.group = hs, KV * hs, H // KV
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)

        def rnd(*shape, scale=0.02):
            return torch.randn(*shape, device="cuda", generator=g) * scale

        self.emb = rnd(c["vocab"], d)
        self.wcls = self.emb if c["shared"] else rnd(c["vocab"], d)
        self.rms_att = 1.0 + rnd(L, d, scale=0.1)
        self.rms_ffn = 1.0 + rnd(L, d, scale=0.1)
        self.rms_final = 1.0 + rnd(d, scale=0.1)
        self.wqkv = rnd(L, d + 2 * self.kv_dim, d)   # rows: q (d), k (kv_dim), v (kv_dim)
        self.wo = rnd(L, d, d)
        self.w13 = rnd(L, 2 * hid, d)                 # rows: w1 (hidden), w3 (hidden)
        self.w2 = rnd(L, d, hid)
        # llama2.c's RoPE: frequency of pair i (i even) is 10000^(-(i % hs) / hs)
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hs, 2, device="cuda").float() / hs))
        angles = torch.outer(torch.arange(c["seq"], device="cuda").float(), freqs)   # [seq, hs/2]
        self.cos, self.sin = angles.cos().contiguous(), angles.sin().contiguous()
        self.key_cache = torch.zeros(L, c["seq"], KV, hs, device="cuda")
        self.value_cache = torch.zeros_like(self.key_cache)
        self.positions = torch.arange(c["seq"], device="cuda")
        self.scale = 1.0 / math.sqrt(hs)

    @staticmethod
    def rmsnorm(torch, x, w):
        return x * torch.rsqrt((x * x).mean() + EPS) * w

    @staticmethod
    def rope(x, cos, sin):
        """x: [heads, hs]; rotates the pairs (x[2i], x[2i+1]) of every head."""
        x = x.view(x.shape[0], -1, 2)
        x0, x1 = x[..., 0], x[..., 1]
        return (x0 * cos - x1 * sin, x0 * sin + x1 * cos)

    def layer_qkv(self, x, layer, cos, sin):
        torch, c = self.torch, self.c
        d, kv = c["dim"], self.kv_dim
        h = self.rmsnorm(torch, x, self.rms_att[layer])
        qkv = self.wqkv[layer] @ h
        q, k, v = qkv[:d], qkv[d:d + kv], qkv[d + kv:]
        q0, q1 = self.rope(q.view(c["heads"], self.hs), cos, sin)
        k0, k1 = self.rope(k.view(c["kv_heads"], self.hs), cos, sin)
        q = torch.stack((q0, q1), dim=-1).view(c["kv_heads"], self.group, self.hs)
        k = torch.stack((k0, k1), dim=-1).view(c["kv_heads"], self.hs)
        return q, k, v.view(c["kv_heads"], self.hs)

    def layer_rest(self, x, layer, q, keys, values, mask):
        """Attention of q [KV, group, hs] over keys/values [T, KV, hs] (+ mask [T]), then the FFN."""
        torch, c = self.torch, self.c
        scores = torch.einsum("kgd,tkd->kgt", q, keys) * self.scale
        if mask is not None:
            scores = scores + mask
        att = torch.softmax(scores, dim=-1)
        a = torch.einsum("kgt,tkd->kgd", att, values).reshape(c["dim"])
        x = x + self.wo[layer] @ a
        h = self.rmsnorm(torch, x, self.rms_ffn[layer])
        gu = self.w13[layer] @ h
        g, u = gu[:c["hidden"]], gu[c["hidden"]:]
        return x + self.w2[layer] @ (torch.nn.functional.silu(g) * u)

    def logits(self, x):
        return self.wcls @ self.rmsnorm(self.torch, x, self.rms_final)

    # ---- eager: Python ints, attention over 0..pos -------------------------------------
    def eager_step(self, token: int, pos: int):
        x = self.emb[token]
        cos, sin = self.cos[pos], self.sin[pos]
        for layer in range(self.c["layers"]):
            q, k, v = self.layer_qkv(x, layer, cos, sin)
            self.key_cache[layer, pos] = k
            self.value_cache[layer, pos] = v
            x = self.layer_rest(x, layer, q, self.key_cache[layer, :pos + 1],
                                self.value_cache[layer, :pos + 1], None)
        return self.logits(x)

    # ---- static: position and token in device memory, attention over the whole cache ---
    def static_step(self, token, pos, logits_out):
        """token, pos: int64 [1] device tensors. Writes the logits, the argmax to token, and
        advances pos: everything a captured graph needs to replay the next step."""
        torch = self.torch
        x = self.emb.index_select(0, token).view(-1)
        cos = self.cos.index_select(0, pos).view(-1)
        sin = self.sin.index_select(0, pos).view(-1)
        mask = torch.where(self.positions <= pos, 0.0, float("-inf"))
        for layer in range(self.c["layers"]):
            q, k, v = self.layer_qkv(x, layer, cos, sin)
            self.key_cache[layer].index_copy_(0, pos, k.unsqueeze(0))
            self.value_cache[layer].index_copy_(0, pos, v.unsqueeze(0))
            x = self.layer_rest(x, layer, q, self.key_cache[layer], self.value_cache[layer], mask)
        logits = self.logits(x)
        logits_out.copy_(logits)
        token.copy_(torch.argmax(logits).view(1))
        pos.add_(1)


def time_loop(torch, step_fn, steps):
    """Wall-clock tokens/s of `steps` calls of step_fn(p) (each returns the token, on the host)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for p in range(steps):
        step_fn(p)
    torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def check_close(torch, want, got, where):
    err = float((got - want).abs().max())
    ref = float(want.abs().max())
    if not err <= 1e-4 + 1e-3 * ref:
        raise SystemExit(f"pytorch_decode: {where}: logits differ from the eager loop's by {err:.3g} "
                         f"(largest logit {ref:.3g})")


def run_shape(torch, name, c, steps, compile_mode, notes):
    m = Model(torch, c, seed=8)
    steps = min(steps, c["seq"])
    out = {}

    # eager: the reference tokens and logits for the checks
    with torch.inference_mode():
        want_logits, tokens, tok = [], [], BOS
        for p in range(CHECK_STEPS):
            lg = m.eager_step(tok, p)
            want_logits.append(lg.clone())
            tok = int(torch.argmax(lg))
            tokens.append(tok)

        state = {"tok": BOS}

        def eager(p):
            state["tok"] = int(torch.argmax(m.eager_step(state["tok"], p)))  # the token to the host
            return state["tok"]

        for p in range(WARMUP_STEPS):
            eager(p)
        state["tok"] = BOS
        out["pytorch_eager"] = time_loop(torch, eager, steps)

    # static step, by hand into a CUDA graph (optionally compiled first)
    def graphed(fn, label):
        tok_buf = torch.full((1,), BOS, dtype=torch.long, device="cuda")
        pos_buf = torch.zeros(1, dtype=torch.long, device="cuda")
        logits = torch.empty(c["vocab"], device="cuda")
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm up (and compile) outside the capture
                    pos_buf.zero_()
                    fn(tok_buf, pos_buf, logits)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn(tok_buf, pos_buf, logits)
            # check: teacher-forced with the eager tokens, the logits agree
            pos_buf.zero_()
            tok_buf.fill_(BOS)
            for p in range(CHECK_STEPS):
                graph.replay()
                check_close(torch, want_logits[p], logits, f"{name} {label} position {p}")
                tok_buf.fill_(tokens[p])
            pos_buf.zero_()
            tok_buf.fill_(BOS)

            def replay(p):
                graph.replay()
                return int(tok_buf.item())  # the token reaches the host each step

            for p in range(WARMUP_STEPS):
                replay(p)
            pos_buf.zero_()
            tok_buf.fill_(BOS)
            return time_loop(torch, replay, steps)

    out["pytorch_graph"] = graphed(m.static_step, "graph")
    if compile_mode != "off":
        try:
            compiled = torch.compile(m.static_step, mode=compile_mode, dynamic=False)
            out["pytorch_compile"] = graphed(compiled, f"compile ({compile_mode})")
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001  (any compiler failure: skip the variant, say why)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            notes.append(f"{name}: pytorch_compile skipped: torch.compile failed: {type(e).__name__}: {first}")
            print(f"pytorch_decode: {notes[-1]}", file=sys.stderr)
    del m
    torch.cuda.empty_cache()
    return out, steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=pp.REPO_ROOT / "results" / "pytorch_decode.json")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps instead of {STEPS}")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    ap.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                    help="torch.compile mode (default: max-autotune-no-cudagraphs; the graph is captured by hand)")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and exit (no GPU needed)")
    args = ap.parse_args(argv)
    s260, s260_source = stories260k_config()
    shapes = [("synthetic-110m", SYNTHETIC_110M, "the workbook's synthetic 110M model's config"),
              ("stories260K", s260, s260_source)]
    steps = QUICK_STEPS if args.quick else STEPS
    if args.dry_run:
        for name, c, source in shapes:
            print(f"{name}: {c} ({source}); {weight_bytes_per_token(c)} weight bytes per token; {steps} steps")
        return 0
    try:
        import torch
    except ImportError:
        print("pytorch_decode: skipped: PyTorch is not installed (pip install torch)", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("pytorch_decode: skipped: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as the workbook computes it
    torch.backends.cudnn.allow_tf32 = False

    timer = pp.Timer(torch, args.quick)
    copy_gbps = pp.measure_copy_gbps(torch, timer)
    print(f"pytorch_decode: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"measured copy ceiling {copy_gbps:.0f} GB/s", file=sys.stderr)
    notes, entries = [], []
    compile_mode = "off" if args.no_compile else args.compile_mode
    for name, c, source in shapes:
        speeds, timed = run_shape(torch, name, c, steps, compile_mode, notes)
        wbytes = weight_bytes_per_token(c)
        for variant, tps in speeds.items():
            e = {"variant": variant, "impl": "pytorch", "shape": name, "tokens_per_s": tps,
                 "tokens_timed": timed, "steps": timed, "warmup_steps": WARMUP_STEPS,
                 "weight_bytes_per_token": wbytes, "roofline_tokens_per_s": copy_gbps * 1e9 / wbytes,
                 "roofline_ceiling": "copy_gbps",
                 "clock": "host", "config_source": source,
                 "params": {k: c[k] for k in ("dim", "hidden", "layers", "heads", "kv_heads", "vocab", "seq")}
                 | {"shared_classifier": c["shared"], "dtype": "float32", "sampling": "greedy", "batch": 1}}
            if variant == "pytorch_compile":
                e["compile_mode"] = compile_mode
            entries.append(e)
            print(f"{name:16s} {variant:16s} {tps:10.1f} tokens/s", file=sys.stderr)

    doc = {"schema": pp.SCHEMA_ID, "chapter": "pytorch_decode", "build": "peer",
           "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "environment": pp.environment(torch, copy_gbps, timer.l2_bytes),
           "peer": {"framework": f"torch {torch.__version__}", "script": "notebooks/peers/pytorch_decode.py",
                    "timing": "wall clock over the timed steps (one token to the host per step), after "
                              f"{WARMUP_STEPS} warmup steps, from BOS, greedy",
                    "quick": args.quick, "notes": notes},
           "results": entries}
    pp.self_check(doc, args.out)
    pp.write_atomic(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"pytorch_decode: wrote {args.out} ({len(entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
