"""Shared by the notebook tests (run by CTest, label notebooks): where things are, which
results to test on, and the skip rule (exit 77 when the notebook tools are not installed)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = HERE / "sample-results"
SHIPPED = REPO / "data" / "results"
NOTEBOOKS = REPO / "notebooks"
SKIP = 77
TOOLS = ["nbconvert", "nbclient", "ipykernel", "matplotlib", "jsonschema"]

sys.path.insert(0, str(NOTEBOOKS))


def require_modules(names=("jsonschema",), python=None):
    """Exits 77 (skipped) with a message when `python` (default: this one) lacks a module."""
    # A venv's python is a symlink to the base interpreter: compare the paths as given.
    if python is None or python == sys.executable:
        missing = [n for n in names if importlib.util.find_spec(n) is None]
    else:
        probe = subprocess.run([python, "-c", "import " + ", ".join(names)], capture_output=True, text=True)
        missing = [] if probe.returncode == 0 else [probe.stderr.strip().splitlines()[-1] if probe.stderr else "?"]
    if missing:
        print(f"skipped: the notebook tools are not installed ({', '.join(missing)}); "
              f"install them with: {python or sys.executable} -m pip install -r notebooks/requirements.txt")
        sys.exit(SKIP)


def shipped_or_fixtures():
    """(results dir, is_synthetic): the shipped H200 results when data/results holds any,
    else the synthetic fixtures (until the lead's GPU run fills data/results)."""
    if SHIPPED.is_dir() and any(SHIPPED.glob("*.json")):
        return SHIPPED, False
    return FIXTURES / "results", True


def gradebook_for(results_dir: Path) -> Path:
    hits = sorted(results_dir.glob("gradebook*.csv"))
    return hits[0] if hits else FIXTURES / "grade-all" / "gradebook.csv"
