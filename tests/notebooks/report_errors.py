#!/usr/bin/env python3
"""CTest notebooks.report_errors: `workbook report` refuses bad input with a message that
names the file and says what to do, instead of a traceback or a report from stale data.

    report_errors.py --workbook build/bin/workbook --out DIR [--python PY]
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from nbtest_common import FIXTURES, TOOLS, require_modules

# Each malformed fixture (tests/notebooks/sample-results/malformed/<case>/<file>) and a phrase the
# message must contain besides the file's path.
MALFORMED = {
    "truncated": "not valid JSON",
    "empty": "the file is empty",
    "wrong_schema": "not a workbook results file",
    "missing_stat": "'p25_us' is a required property",
    "out_of_order": "statistics out of order",
    "duplicate": "measured twice",
    "misnamed": "should be named 04_fused_softmax-solution.json",
    "nan": "non-finite number NaN",
    "no_ceilings": "'ceilings' is a required property",
}


def run(workbook, *args):
    r = subprocess.run([workbook, "report", *args], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workbook", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    require_modules(TOOLS, python=args.python)
    py = ["--python", args.python]
    failures = []

    def expect(name, got, code, *phrases):
        rc, text = got
        bad = [p for p in phrases if p not in text]
        if rc != code or bad:
            failures.append(f"{name}: expected exit {code} and {phrases}; got exit {rc}:\n{text}")
        else:
            print(f"ok    {name}: exit {rc}")

    good = FIXTURES / "results"
    for case, phrase in MALFORMED.items():
        folder = FIXTURES / "malformed" / case
        bad_file = next(folder.glob("*.json"))
        # The malformed file comes first on the path, as a broken local results/ would.
        expect(f"malformed {case}",
               run(args.workbook, "--results-dir", str(folder), "--results-dir", str(good),
                   "--notebook", "01", "--out", str(args.out), *py),
               1, str(bad_file), phrase, "./workbook bench")
    expect("missing results dir", run(args.workbook, "--results-dir", "/nonexistent/results", *py), 2,
           "/nonexistent/results", "does not exist")
    with tempfile.TemporaryDirectory() as empty:
        expect("empty results dir", run(args.workbook, "--results-dir", empty, "--out", str(args.out), *py), 2,
               "no results files found", "./workbook bench")
    expect("missing gradebook", run(args.workbook, "--results-dir", str(good), "--gradebook", "/nonexistent/gb.csv",
                                    "--out", str(args.out), *py), 2, "/nonexistent/gb.csv", "grade-all")
    expect("unknown notebook", run(args.workbook, "--results-dir", str(good), "--notebook", "nope",
                                   "--out", str(args.out), *py), 2, "no notebook matches 'nope'", "02_fusion")
    expect("no Jupyter", run(args.workbook, "--results-dir", str(good), "--out", str(args.out),
                             "--python", "/nonexistent/python3"), 2,
           "pip install -r", "notebooks/requirements.txt")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
