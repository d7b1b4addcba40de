#!/usr/bin/env python3
"""Writes SYNTHETIC results files and a gradebook for testing the notebooks' rendering and
the results validation. They are not measurements: every number comes from the simple
formulas below, environment.gpu says "SYNTHETIC FIXTURE", and every figure drawn from them
carries a "SYNTHETIC TEST DATA" watermark. Real numbers live in data/results/ (written by
`./workbook bench` on a GPU).

    python3 tests/notebooks/make_sample_results.py [OUT_DIR]     (default: next to this script)

Deterministic: rerunning it reproduces the committed files byte for byte (a test checks).
"""
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

ENV = {
    "gpu": "SYNTHETIC FIXTURE (not a measurement)",
    "compute_capability": "9.0",
    "sm_count": 132,
    "l2_bytes": 62914560,
    "global_mem_bytes": 150000000000,
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 3201,
    "mem_bus_bits": 6144,
    "driver_version": "13.0",
    "runtime_version": "13.0",
    "ceilings": {"copy_gbps": 4000.0, "launch_us": 2.0, "launch_sync_us": 8.0, "l2_bytes": 62914560},
    "git_revision": "fixture",
    "host": "fixture",
}
CREATED = "2000-01-01T00:00:00Z"


def stats(median_us, bytes_, flops=0.0, cache="cold", clock="device", rng=None):  # noqa: PLR0913
    """A harness entry's statistics around a median (made up, internally consistent)."""
    rng = rng or random.Random(0)
    spread = 0.02 + 0.03 * rng.random()
    copy = ENV["ceilings"]["copy_gbps"]
    gbps = bytes_ / (median_us * 1e3)
    return {
        "cache": cache, "clock": clock,
        "median_us": round(median_us, 3),
        "min_us": round(median_us * (1 - spread), 3),
        "max_us": round(median_us * (1 + 4 * spread), 3),
        "mean_us": round(median_us * (1 + spread / 2), 3),
        "p25_us": round(median_us * (1 - spread / 3), 3),
        "p75_us": round(median_us * (1 + spread / 3), 3),
        "noise": round(spread / 4, 4),
        "samples": 50 + rng.randrange(150),
        "converged": True,
        "bytes": bytes_, "flops": flops,
        "gbps": round(gbps, 2),
        "pct_of_peak": round(100 * gbps / copy, 2),
        "floor_us": round(bytes_ / (copy * 1e3), 3),
    }


def mem_time(bytes_, efficiency, passes=1, launches=1):
    """Made-up time: launch cost plus traffic at a fraction of the copy ceiling."""
    copy = ENV["ceilings"]["copy_gbps"]
    size_eff = efficiency * bytes_ / (bytes_ + 8e6)  # small sizes cannot fill the GPU
    return launches * 2.5 + passes * bytes_ / (copy * 1e3 * max(size_eff, 0.02))


def doc(chapter, build, results):
    return {"schema": "workbook-results/1", "chapter": chapter, "build": build,
            "created_utc": CREATED, "environment": ENV, "results": results}


def ladder_entry(variant, impl, tps, breakdown, threads=16):
    """A rung as wb::model::measure_rung writes it (made-up numbers)."""
    return {"variant": variant, "impl": impl, "shape": "synthetic-110m", "tokens_per_s": tps,
            "tokens_timed": 31, "steps": 32, "threads": threads,
            "matmul_us_per_token": 0.8e6 / tps, "other_us_per_token": 0.2e6 / tps,
            "matmul_calls_per_token": 85,
            "breakdown_method": "SYNTHETIC fixture: made-up numbers",
            "breakdown_us": breakdown}


def bd(alloc, h2d, kernel, d2h, free):
    return {"alloc": alloc, "h2d": h2d, "kernel": kernel, "d2h": d2h, "free": free}


def cpu_rungs():
    return [ladder_entry("cpu_1thread", "cpu", 12.0, bd(0, 0, 66000.0, 0, 0), threads=1),
            ladder_entry("cpu_all_threads", "cpu", 150.0, bd(0, 0, 5300.0, 0, 0))]


MATVEC_SHAPES = [(32000, 4096), (11008, 4096), (4096, 4096), (768, 768)]


def matvec_entries(impl, efficiency, rng):
    out = []
    for cache in ("cold", "hot"):
        for rows, cols in MATVEC_SHAPES:
            b = 4.0 * (rows * cols + cols + rows)
            eff = efficiency * (1.6 if cache == "hot" and b < 60e6 else 1.0)
            e = {"variant": "matvec", "impl": impl, "shape": f"{rows}x{cols}"}
            e.update(stats(mem_time(b, eff), b, 2.0 * rows * cols, cache=cache, rng=rng))
            e["fraction_of_copy"] = round(e["gbps"] / ENV["ceilings"]["copy_gbps"], 4)
            out.append(e)
    return out


def sweep_entries(impl, shapes, slow, rng, extra_of, passes_unfused, launches_unfused, student_done=True):
    """copy (baseline), unfused, fused at each size, as the chapter 04/05 benches write them."""
    out = []
    for shape, n in shapes:
        b = 2.0 * 4 * n
        unfused_us = None
        variants = [("copy", "baseline", 0.97, 1, 1)]
        if student_done:
            variants += [("unfused", impl, 0.7, passes_unfused, launches_unfused), ("fused", impl, 0.9 / slow, 1, 1)]
        for variant, who, eff, passes, launches in variants:
            e = {"variant": variant, "impl": who, "shape": shape}
            e.update(stats(mem_time(b, eff, passes, launches), b, rng=rng))
            e.update(extra_of(shape, n))
            if variant == "unfused":
                unfused_us = e["median_us"]
            if variant == "fused" and unfused_us:
                e["speedup_vs_unfused"] = round(unfused_us / e["median_us"], 3)
            out.append(e)
    return out


SOFTMAX_SHAPES = [(16, 151936), (1, 151936), (64, 32000), (4096, 4096), (8192, 1024), (32768, 256)]
GELU_LOG2 = [20, 24, 26, 27]


def chapter_files(build, slow, student_done=True):
    """slow: the student's kernels are this much slower than the reference (synthetic)."""
    impl = build
    rng = random.Random(build)
    files = {}
    timer = [
        {"variant": "copy_bandwidth", "impl": "harness", "shape": "2x480MiB", "gbps": ENV["ceilings"]["copy_gbps"]},
        {"variant": "launch_latency", "impl": "harness", "shape": "empty kernel", "launch_us": 2.0, "launch_sync_us": 8.0},
        {"variant": "first_launch", "impl": "trap", "shape": "empty kernel", "host_us": 25000.0},
        dict({"variant": "spin", "impl": "harness", "shape": "1000us"}, **stats(1000.5, 0, cache="hot", rng=rng)),
        dict({"variant": "copy", "impl": "harness", "shape": "512MiB"}, **stats(270.0, 2.0 * 512 * 2**20, cache="hot", rng=rng)),
        {"variant": "spin", "impl": impl, "shape": "1000us", "median_us": 1000.4 * slow},
        {"variant": "copy", "impl": impl, "shape": "512MiB", "median_us": 271.0 * slow,
         "gbps": 2.0 * 512 * 2**20 / (271.0 * slow * 1e3)},
    ]
    files["00_measure_right"] = timer
    files["01_naive_matvec"] = matvec_entries(impl, 0.8 / slow, rng) + [
        ladder_entry("01_naive", impl, 6.0 / slow, bd(40000.0, 95000.0, 4000.0 * slow, 300.0, 25000.0))]
    files["02_preallocated"] = [
        {"variant": "allocate_every_call_replay", "impl": impl, "shape": "synthetic-110m",
         "breakdown_us": bd(40000.0, 95000.0, 4000.0 * slow, 300.0, 25000.0), "total_us": 164300.0},
        ladder_entry("02_preallocated", impl, 9.5 / slow, bd(0.0, 95000.0, 4000.0 * slow, 300.0, 0.0))]
    files["03_persistent_weights"] = cpu_rungs() + [
        ladder_entry("01_naive", impl, 6.0 / slow, bd(40000.0, 95000.0, 4000.0 * slow, 300.0, 25000.0)),
        ladder_entry("02_preallocated", impl, 9.5 / slow, bd(0.0, 95000.0, 4000.0 * slow, 300.0, 0.0)),
        ladder_entry("03_persistent", impl, 1400.0 / slow, bd(0.0, 30.0, 650.0 * slow, 20.0, 0.0)),
    ] + matvec_entries(impl, 0.85 / slow, rng)
    files["04_fused_softmax"] = sweep_entries(
        impl, [(f"{r}x{c}", r * c) for r, c in SOFTMAX_SHAPES], slow, rng,
        lambda shape, n: {"rows": int(shape.split("x")[0]), "cols": int(shape.split("x")[1])}, 2.5, 3)
    files["05_fused_gelu"] = sweep_entries(
        impl, [(f"2^{k}", 1 << k) for k in GELU_LOG2], slow, rng, lambda shape, n: {"n": n}, 8, 8,
        student_done=student_done)
    files["08_token_loop"] = capstone(build, slow)
    return files


# Chapter 08 (the capstone) and its PyTorch peer: made-up numbers in the shape of
# tests/08_token_loop/bench.cu's and notebooks/peers/pytorch_decode.py's entries.
DECODE_MODELS = {  # shape -> (weight bytes per token, scale of the made-up speeds)
    "synthetic-110m": (4.0 * (768 + 12 * (2 * 768 + 4 * 768 * 768 + 3 * 768 * 2048) + 768 + 32000 * 768), 1.0),
    "stories260K": (4.0 * (64 + 5 * (2 * 64 + 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172) + 64 + 512 * 64), 6.0),
}


def capstone(build, slow):
    impl = build
    out = []
    for shape, (wbytes, scale) in DECODE_MODELS.items():
        roof = ENV["ceilings"]["copy_gbps"] * 1e9 / wbytes
        for variant, who, tps in [("cpu_all_threads", "cpu", 150.0 * scale ** 2),
                                  ("03_persistent", impl, 1400.0 * scale / slow)]:
            e = ladder_entry(variant, who, tps, bd(0, 0, 5300.0, 0, 0) if who == "cpu"
                             else bd(0.0, 30.0, 650.0 * slow, 20.0, 0.0), threads=1 if variant == "cpu_1thread" else 16)
            e["shape"] = shape
            out.append(e)
        stages = {"embed_norm": 40.0, "matvec": 130.0 * slow, "rope": 12.0, "attention": 60.0 * slow,
                  "swiglu": 12.0, "sampler": 25.0}
        if shape == "stories260K":
            stages = {k: v / 3 for k, v in stages.items()}
        step_us = sum(stages.values())
        stages["total"] = step_us
        for variant, tps in [("08_step_by_step", 1e6 / (step_us + 350.0)), ("08_graph", 1e6 / (step_us + 40.0))]:
            out.append({"variant": variant, "impl": impl, "shape": shape, "tokens_per_s": round(tps, 3),
                        "tokens_timed": 255, "steps": 256, "stage_us": stages,
                        "breakdown_us": {"kernel": step_us},
                        "breakdown_method": "SYNTHETIC fixture: made-up numbers",
                        "weight_bytes_per_token": wbytes, "roofline_tokens_per_s": round(roof, 3),
                        "roofline_ceiling": "copy_gbps"})
    return out


def decode_peer():
    out = []
    for shape, (wbytes, scale) in DECODE_MODELS.items():
        for variant, tps in [("pytorch_eager", 130.0 * scale), ("pytorch_graph", 700.0 * scale),
                             ("pytorch_compile", 900.0 * scale)]:
            out.append({"variant": variant, "impl": "pytorch", "shape": shape, "tokens_per_s": tps,
                        "tokens_timed": 256, "steps": 256, "clock": "host", "weight_bytes_per_token": wbytes,
                        "roofline_tokens_per_s": round(ENV["ceilings"]["copy_gbps"] * 1e9 / wbytes, 3)})
    d = doc("pytorch_decode", "peer", out)
    d["peer"] = {"framework": "SYNTHETIC (no torch was run)"}
    return d


def peers():
    rng = random.Random("pytorch")
    out = []
    for rows, cols in SOFTMAX_SHAPES:
        b = 2.0 * 4 * rows * cols
        for variant, eff, passes, launches in [("pytorch", 0.6, 1, 1), ("pytorch_unfused", 0.6, 3, 4)]:
            e = {"variant": variant, "impl": "pytorch", "shape": f"{rows}x{cols}", "op": "softmax",
                 "params": {"rows": rows, "cols": cols, "dtype": "float32"}}
            e.update(stats(mem_time(b, eff, passes, launches) + 8.0, b, rng=rng))
            out.append(e)
    for k in GELU_LOG2:
        n = 1 << k
        b = 2.0 * 4 * n
        for variant, eff, passes, launches in [("pytorch", 0.9, 1, 1), ("pytorch_unfused", 0.8, 8, 8)]:
            e = {"variant": variant, "impl": "pytorch", "shape": f"2^{k}", "op": "gelu",
                 "params": {"n": n, "dtype": "float32", "approximate": "tanh"}}
            e.update(stats(mem_time(b, eff, passes, launches) + 8.0, b, rng=rng))
            out.append(e)
    d = doc("pytorch_peers", "peer", out)
    d["peer"] = {"framework": "SYNTHETIC (no torch was run)"}
    return d


def grade_all():
    """A class as `workbook grade-all` writes it: gradebook.csv (student, one column per
    chapter slug, total, max_score, status, notes) and students/<name>/report.json, of which
    the notebook reads grader.device and the timing tests' speedup* metrics."""
    rng = random.Random("class")
    chapters = ["00_measure_right", "01_naive_matvec", "02_preallocated", "03_persistent_weights",
                "04_fused_softmax", "05_fused_gelu"]
    files = {}
    lines = ["student," + ",".join(chapters) + ",total,max_score,status,notes"]
    for i in range(24):
        name = f"student{i:02d}"
        progress = rng.random()
        pts = [round(10 * (0.6 + 0.4 * rng.random()), 1) if progress * len(chapters) > c else 0.0
               for c in range(len(chapters))]
        status, notes = "graded", ""
        if i == 7:
            status, notes, pts = "incomplete", "04 fused softmax (compile error)", [0.0] * len(chapters)
        lines.append(f"{name}," + ",".join(f"{p:g}" for p in pts)
                     + f",{sum(pts):g},{10 * len(chapters)},{status},{notes}")
        report = {"student": name, "status": status, "score": sum(pts), "max_score": 10 * len(chapters),
                  "grader": {"device": ENV["gpu"]}, "chapters": []}
        for c, slug in enumerate(chapters):
            tests = []
            if slug[:2] in ("04", "05") and pts[c] > 0:
                for shape in ("16x151936", "4096x4096") if slug[:2] == "04" else ("2^24", "2^26"):
                    tests.append({"name": f"fused beats unfused {shape}", "status": "passed",
                                  "metrics": {"speedup_vs_unfused": round(1.5 + 5 * rng.random(), 3)}})
            report["chapters"].append({"id": slug[:2], "slug": slug, "score": pts[c], "max_score": 10,
                                       "kinds": [{"kind": "timing", "tests": tests}]})
        files[f"students/{name}/report.json"] = json.dumps(report, indent=1) + "\n"
    files["gradebook.csv"] = "\n".join(lines) + "\n"
    return files


def malformed(valid_softmax: dict) -> dict:
    """One broken file per rule the validator enforces (name -> text)."""
    def dumps(d):
        return json.dumps(d, indent=1) + "\n"
    out = {}
    good = dumps(valid_softmax)
    out["truncated/04_fused_softmax-solution.json"] = good[: len(good) // 2]
    out["empty/04_fused_softmax-solution.json"] = ""
    d = json.loads(good); d["schema"] = "something-else/2"
    out["wrong_schema/04_fused_softmax-solution.json"] = dumps(d)
    d = json.loads(good); del d["results"][4]["p25_us"]
    out["missing_stat/04_fused_softmax-solution.json"] = dumps(d)
    d = json.loads(good); d["results"][0]["min_us"] = d["results"][0]["median_us"] * 2
    out["out_of_order/04_fused_softmax-solution.json"] = dumps(d)
    d = json.loads(good); d["results"].append(dict(d["results"][2]))
    out["duplicate/04_fused_softmax-solution.json"] = dumps(d)
    out["misnamed/05_fused_gelu-solution.json"] = good
    out["nan/04_fused_softmax-solution.json"] = good.replace(
        f'"median_us": {valid_softmax["results"][2]["median_us"]}', '"median_us": NaN', 1)
    d = json.loads(good); del d["environment"]["ceilings"]
    out["no_ceilings/04_fused_softmax-solution.json"] = dumps(d)
    return out


def main(out_dir: Path):
    results = out_dir / "results"
    results.mkdir(parents=True, exist_ok=True)
    written = []
    solution = chapter_files("solution", 1.0)
    for chapter, entries in solution.items():
        written.append((results / f"{chapter}-solution.json", json.dumps(doc(chapter, "solution", entries), indent=1) + "\n"))
    student = chapter_files("student", 1.35, student_done=False)
    # A student part-way through: 00, 01 and 04 done; 05 benched before its TODOs were done
    # (the bench skips what is not implemented, so only the copy baseline is there).
    for chapter in ["00_measure_right", "01_naive_matvec", "04_fused_softmax", "05_fused_gelu"]:
        written.append((results / f"{chapter}-student.json", json.dumps(doc(chapter, "student", student[chapter]), indent=1) + "\n"))
    written.append((results / "pytorch_peers.json", json.dumps(peers(), indent=1) + "\n"))
    written.append((results / "pytorch_decode.json", json.dumps(decode_peer(), indent=1) + "\n"))
    for rel, text in grade_all().items():
        written.append((out_dir / "grade-all" / rel, text))
    for rel, text in malformed(doc("04_fused_softmax", "solution", solution["04_fused_softmax"])).items():
        written.append((out_dir / "malformed" / rel, text))
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(written)} synthetic fixture files under {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "sample-results")
