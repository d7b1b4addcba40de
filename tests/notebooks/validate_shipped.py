#!/usr/bin/env python3
"""CTest notebooks.results_schema: every results file shipped in data/results/ is valid
(docs/results.schema.json plus the rules wbplots checks), none of them is a synthetic
fixture, and the folder holds data only (no figures: those belong to report/).

While data/results holds no results yet, the synthetic fixtures are validated instead and
the test says so."""
import sys

from nbtest_common import SHIPPED, require_modules, shipped_or_fixtures

require_modules(("jsonschema",))
import wbplots  # noqa: E402

ALLOWED_SUFFIXES = {".json", ".csv", ".md"}


def validate_write_flush(folder):
    """data/results/write-flush/: results files measured with WB_L2_FLUSH=write, and only those."""
    problems = []
    for path in sorted(folder.iterdir()):
        if path.suffix != ".json":
            problems.append(f"{path}: write-flush/ holds results files (.json) only")
            continue
        try:
            doc = wbplots.validate_file(path)
        except wbplots.ResultsError as e:
            problems.append(str(e))
            continue
        flush = doc["environment"].get("l2_flush")
        if flush != "write":
            problems.append(f"{path}: environment.l2_flush is {flush!r}; write-flush/ holds results "
                            "measured with WB_L2_FLUSH=write only")
            continue
        print(f"ok    write-flush/{path.name}: {doc['chapter']} {doc['build']}, "
              f"{len(doc['results'])} entries, {doc['environment']['gpu']}, write-only flush")
    return problems


def main() -> int:
    results, synthetic = shipped_or_fixtures()
    if synthetic:
        print(f"note: {SHIPPED} holds no results yet; validating the synthetic fixtures in {results}")
    problems = []
    files = sorted(results.glob("*.json"))
    for path in files:
        try:
            doc = wbplots.validate_file(path)
        except wbplots.ResultsError as e:
            problems.append(str(e))
            continue
        is_fixture = wbplots.SYNTHETIC_MARK in doc["environment"]["gpu"]
        if not synthetic and is_fixture:
            problems.append(f"{path}: a synthetic fixture in the shipped results (environment.gpu says "
                            f"{doc['environment']['gpu']!r}); data/results holds real measurements only")
        print(f"ok    {path.name}: {doc['chapter']} {doc['build']}, {len(doc['results'])} entries, "
              f"{doc['environment']['gpu']}")
    if not synthetic:
        for path in sorted(SHIPPED.iterdir()):
            if path.is_file() and path.suffix not in ALLOWED_SUFFIXES:
                problems.append(f"{path}: data/results holds results files (.json), gradebooks (.csv) and "
                                "notes (.md) only; figures and reports belong in report/")
            if path.is_dir() and path.name == "write-flush":
                problems += validate_write_flush(path)
            elif path.is_dir():
                problems.append(f"{path}: no folders in data/results but write-flush/ (the same "
                                "benches with the write-only L2 flush, WB_L2_FLUSH=write)")
    if not files:
        problems.append(f"{results}: no results files at all")
    for p in problems:
        print(f"error {p}")
    if problems:
        return 1
    print(f"{len(files)} results file(s) valid" + (" (synthetic fixtures)" if synthetic else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
