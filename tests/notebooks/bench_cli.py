#!/usr/bin/env python3
"""CTest notebooks.bench_cli: `workbook bench` against stand-in bench programs, one per way a
run can end (writes a good file; not implemented yet; writes a malformed file; no CUDA
device; crashes; hangs), in a fake build directory (--no-build), so the command's handling
of each is tested on any machine. Then, when the real build has bench_00_solution, one real
run: skipped (exit 77) without a GPU, a valid results file with one.

    bench_cli.py --workbook build/bin/workbook [--real-build-dir build]
"""
import argparse
import json
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from nbtest_common import FIXTURES

STANDINS = {
    # (chapter id, build): shell body; "$2" is the --out path the command passes.
    ("04", "solution"): 'cp "{fixtures}/04_fused_softmax-solution.json" "$2"; echo "bench_04: fused 16x151936" >&2',
    ("04", "student"): 'cp "{fixtures}/04_fused_softmax-student.json" "$2"',
    ("01", "student"): 'echo "bench_01: not implemented yet: ch01::matvec (matvec.cu)" >&2; exit 1',
    ("05", "solution"): 'cp "{fixtures}/04_fused_softmax-solution.json" "$2"',  # wrong chapter inside
    ("05", "student"): 'cp "{fixtures}/05_fused_gelu-student.json" "$2"; '
                       'echo "bench_05: fused: not implemented yet: ch05::gelu_fused (skipped)" >&2',
    ("03", "student"): 'echo "bench_03: skipped: no CUDA device" >&2; exit 77',
    ("02", "solution"): 'kill -SEGV $$',
    ("03", "solution"): 'exec sleep 30',
}


def make_build_dir(root: Path, chapters="") -> Path:
    build = root / "build"
    (build / "bin").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text(
        f"# fake\nWB_CHAPTERS:STRING={chapters}\nWB_BUILDS:STRING=solution;student\n"
        "CMAKE_COMMAND:INTERNAL=/bin/false\n")
    for (nn, build_name), body in STANDINS.items():
        p = build / "bin" / f"bench_{nn}_{build_name}"
        p.write_text("#!/bin/sh\n" + body.format(fixtures=FIXTURES / "results") + "\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return build


def bench(workbook, *args):
    r = subprocess.run([workbook, "bench", *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workbook", required=True)
    ap.add_argument("--real-build-dir", type=Path)
    args = ap.parse_args()
    failures = []

    def check(name, ok, detail=""):
        print(("ok    " if ok else "FAIL  ") + name)
        if not ok:
            failures.append(f"{name}\n{detail}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build = make_build_dir(tmp)
        results = tmp / "results"
        results.mkdir()
        stale = results / "05_fused_gelu-solution.json"
        stale.write_text("left from an earlier run\n")

        rc, out = bench(args.workbook, "01", "02", "03", "04", "05", "--no-build", "--build-dir", str(build),
                        "--results-dir", str(results), "--timeout", "3")
        print(out)
        check("a failed run makes the exit status 1", rc == 1, out)
        check("progress is shown as [k/n] per run", "[1/10] 01_naive_matvec (solution)" in out, out)
        check("the bench's own progress is streamed", "bench_04: fused 16x151936" in out, out)
        for name in ("04_fused_softmax-solution.json", "04_fused_softmax-student.json"):
            path = results / name
            check(f"{name} written and valid JSON", path.is_file() and json.loads(path.read_text())["results"], out)
        check("not implemented yet is 'todo', not a failure",
              "to do: bench_01: not implemented yet: ch01::matvec" in out and not (results / "01_naive_matvec-student.json").exists(), out)
        check("a malformed file is refused, naming what is wrong",
              "wrote a malformed results file" in out and "expected '05_fused_gelu', 'solution'" in out, out)
        check("the earlier file is left alone and said to be stale",
              stale.read_text() == "left from an earlier run\n" and "is left from an earlier run" in out, out)
        check("no CUDA device reads as skipped", "03_persistent_weights (student): skipped: no CUDA device" in out, out)
        check("a student file with baselines only is written and reads as to do",
              (results / "05_fused_gelu-student.json").is_file()
              and "has baselines only: your code is not implemented yet (bench_05: fused: not implemented yet" in out, out)
        check("a crash names the signal", "killed by SIGSEGV" in out, out)
        check("a hang is stopped at --timeout", "timed out" in out, out)
        check("a bench program that does not exist is named",
              "bench_01_solution does not exist" in out, out)
        leftovers = [p.name for p in results.iterdir() if not p.name.endswith(".json")]
        check("no temporary files are left in the results directory", not leftovers, str(leftovers))

        rc, out = bench(args.workbook, "03", "--builds", "student", "--no-build", "--build-dir", str(build),
                        "--results-dir", str(results))
        check("only runs without a GPU: exit 77", rc == 77 and "no CUDA device" in out, out)

        rc, out = bench(args.workbook, "nope", "--no-build", "--build-dir", str(build))
        check("an unknown chapter is refused with the list", rc == 2 and "04_fused_softmax" in out, out)
        rc, out = bench(args.workbook, "04", "--builds", "teacher", "--no-build", "--build-dir", str(build))
        check("an unknown build is refused", rc == 2 and "unknown build 'teacher'" in out, out)
        rc, out = bench(args.workbook, "04", "--build-dir", str(tmp / "nowhere"))
        check("an unconfigured build directory is refused with the cmake line",
              rc == 2 and "CMakeCache.txt" in out and "cmake -S" in out, out)

        limited = make_build_dir(tmp / "limited", chapters="04;05")
        rc, out = bench(args.workbook, "01", "--no-build", "--build-dir", str(limited),
                        "--results-dir", str(results))
        check("a chapter left out of the build is said so", "not configured" in out and "WB_CHAPTERS='04;05'" in out, out)

        if args.real_build_dir and (args.real_build_dir / "bin" / "bench_00_solution").exists():
            real = tmp / "real"
            rc, out = bench(args.workbook, "00", "--builds", "solution", "--no-build", "--quick",
                            "--build-dir", str(args.real_build_dir), "--results-dir", str(real))
            print(out)
            if rc == 77:
                check("the real bench_00 without a GPU: skipped", "no CUDA device" in out, out)
            else:
                path = real / "00_measure_right-solution.json"
                check("the real bench_00 writes a valid results file", rc == 0 and path.is_file(), out)
                if path.is_file():
                    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
                    try:
                        import wbplots
                        wbplots.validate_file(path)
                        check("the real bench_00's file passes the schema", True)
                    except ImportError:
                        pass
                    except Exception as e:  # ResultsError
                        if "needs the jsonschema package" in str(e):
                            print("note: schema not checked here (no jsonschema on this machine)")
                        else:
                            check("the real bench_00's file passes the schema", False, str(e))

    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
