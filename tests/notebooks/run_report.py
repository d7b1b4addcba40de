#!/usr/bin/env python3
"""CTest notebooks.render.<notebook>: `workbook report` executes one notebook headless on
the shipped results (data/results), or on the synthetic fixtures while data/results is
empty, and must produce its HTML with the figures embedded and saved as PNG.

    run_report.py --workbook build/bin/workbook --notebook 02_fusion --out DIR [--python PY]
"""
import argparse
import subprocess
import sys
from pathlib import Path

from nbtest_common import TOOLS, gradebook_for, require_modules, shipped_or_fixtures

# What each notebook draws from the fixtures, which have every chapter and a student
# part-way through: the full set must appear.
FIXTURE_FIGURES = {
    "01_transfer_ladder": {"speedup_vs_cpu", "time_breakdown", "capstone_stages", "decode_roofline",
                           "matvec_bandwidth"},
    "02_fusion": {"softmax_sweep", "gelu_sweep", "roofline"},
    "03_student_vs_reference": {"summary", "00_measure_right_time", "01_naive_matvec_time",
                                "01_naive_matvec_tokens", "03_persistent_weights_tokens",
                                "04_fused_softmax_time", "05_fused_gelu_time"},
    "04_class": {"scores", "points_by_chapter", "speedups"},
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workbook", required=True)
    ap.add_argument("--notebook", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    require_modules(TOOLS, python=args.python)

    results, synthetic = shipped_or_fixtures()
    gradebook = gradebook_for(results)
    cmd = [args.workbook, "report", "--results-dir", str(results), "--notebook", args.notebook,
           "--out", str(args.out), "--python", args.python, "--gradebook", str(gradebook)]
    print("$ " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    print(run.stdout + run.stderr)
    failures = []
    if run.returncode != 0:
        failures.append(f"workbook report exited {run.returncode}")

    html = args.out / f"{args.notebook}.html"
    figures = sorted((args.out / "figures" / args.notebook).glob("*.png"))
    if not html.is_file():
        failures.append(f"{html} was not written")
    else:
        embedded = html.read_text(encoding="utf-8").count("data:image/png;base64")
        if embedded < len(figures) or embedded == 0:
            failures.append(f"{html} embeds {embedded} PNG figure(s); expected at least {max(1, len(figures))}")
        if "Traceback" in html.read_text(encoding="utf-8"):
            failures.append(f"{html} contains a Python traceback")
    for f in figures:
        if f.read_bytes()[:8] != PNG_MAGIC or f.stat().st_size < 2000:
            failures.append(f"{f} is not a plausible PNG figure ({f.stat().st_size} bytes)")
    names = {f.stem for f in figures}
    if synthetic or args.notebook == "04_class" and "sample-results" in str(gradebook):
        missing = FIXTURE_FIGURES.get(args.notebook, set()) - names
        if missing:
            failures.append(f"figures missing from the fixture render: {', '.join(sorted(missing))}")
    elif not figures:
        failures.append(f"no figures in {args.out / 'figures' / args.notebook}")

    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print(f"ok: {html} with {len(figures)} figure(s): {', '.join(sorted(names))}"
              + (" (synthetic fixtures)" if synthetic else f" (results from {results})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
