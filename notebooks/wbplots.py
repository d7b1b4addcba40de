"""Loading, validating and plotting the workbook's results files (schema workbook-results/1).

The notebooks read results only through this module, so every one of them finds files the
same way, rejects a malformed file with a message that names it, and stamps every figure
with the GPU, what was measured and the baseline.

Where results come from: WB_RESULTS_PATH, a list of directories separated by os.pathsep
(':' on Linux), earliest first. A file found in an earlier directory shadows a file of the
same name in a later one, so local results (results/) win over the shipped reference
results (data/results/) chapter by chapter. `./workbook report` sets it; without it the
notebooks use <repo>/results (when it holds results) then <repo>/data/results.

Where figures go: WB_REPORT_DIR/figures/<notebook>/<name>.png when WB_REPORT_DIR is set.

Command line (used by `./workbook report` and the tests):
    python3 notebooks/wbplots.py validate DIR_OR_FILE...
"""
from __future__ import annotations

import csv
import html
import json
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_ID = "workbook-results/1"
REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO_ROOT / "docs" / "results.schema.json"
SYNTHETIC_MARK = "SYNTHETIC"  # fixture files say so in environment.gpu
INSTALL_HINT = "install the notebook tools with: python3 -m pip install -r notebooks/requirements.txt"


class ResultsError(Exception):
    """A results file (or gradebook) is missing or malformed. The message names the file."""


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

def _reject_constant(name):
    # Python's json accepts NaN and Infinity; a results file must not contain them.
    raise ValueError(f"non-finite number {name} (results files hold finite numbers only)")


def _read_json(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except OSError as e:
        raise ResultsError(f"{path}: cannot be read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise ResultsError(f"{path}: the file is empty (did the bench run stop early?)")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e.msg}; line {e.lineno}, "
                           f"column {e.colno})") from None
    except ValueError as e:
        m = re.search(r"-?\b(NaN|Infinity)\b", text)
        where = f" at line {text.count(chr(10), 0, m.start()) + 1}" if m else ""
        raise ResultsError(f"{path}: {e}{where}") from None


_validator = None


def _schema_validator():
    global _validator
    if _validator is None:
        try:
            import jsonschema
        except ImportError:
            raise ResultsError(f"validating results needs the jsonschema package; {INSTALL_HINT}")
        schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
        _validator = jsonschema.Draft202012Validator(schema)
    return _validator


def _where(doc, path) -> str:
    """A readable location for a schema error: results[3] (variant 'fused', shape '16x151936')."""
    parts = list(path)
    if len(parts) >= 2 and parts[0] == "results" and isinstance(parts[1], int):
        entry = doc["results"][parts[1]]
        who = ""
        if isinstance(entry, dict):
            who = f" (variant {entry.get('variant')!r}, shape {entry.get('shape')!r})"
        rest = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in parts[2:])
        return f"results[{parts[1]}]{who}{rest}"
    return "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in parts).lstrip(".") or "top level"


def is_harness(entry) -> bool:
    """A wb::Bench timing (every statistic present), not a metrics entry."""
    return "samples" in entry and "median_us" in entry


def _semantic_problems(doc) -> list[str]:
    """Rules JSON Schema cannot say: ordered statistics, no duplicate entries."""
    problems = []
    seen = {}
    for i, e in enumerate(doc["results"]):
        key = (e["variant"], e["impl"], e["shape"], e.get("cache"), e.get("clock"), e.get("op"))
        if key in seen:
            problems.append(f"results[{i}] repeats results[{seen[key]}]: variant {e['variant']!r}, "
                            f"impl {e['impl']!r}, shape {e['shape']!r} measured twice")
        seen[key] = i
        if is_harness(e):
            order = [e["min_us"], e["p25_us"], e["median_us"], e["p75_us"], e["max_us"]]
            slack = 1e-6 * max(order)
            if any(b < a - slack for a, b in zip(order, order[1:])):
                problems.append(f"results[{i}] (variant {e['variant']!r}, shape {e['shape']!r}): "
                                "statistics out of order; expected min <= p25 <= median <= p75 <= max, "
                                f"got {order}")
    return problems


def validate_doc(doc, path: Path) -> list[str]:
    """Every problem with a parsed results document, each naming where it is."""
    problems = []
    validator = _schema_validator()
    errors = sorted(validator.iter_errors(doc), key=lambda err: list(map(str, err.absolute_path)))
    for err in errors[:12]:
        problems.append(f"{_where(doc, err.absolute_path)}: {err.message}")
    if len(errors) > 12:
        problems.append(f"... and {len(errors) - 12} more schema errors")
    if not errors:
        problems += _semantic_problems(doc)
        # A chapter's file is NN_slug-<build>.json; a PyTorch peer's, pytorch_<name>.json.
        is_peer = doc["chapter"].startswith("pytorch_")
        expected = f"{doc['chapter']}.json" if is_peer else f"{doc['chapter']}-{doc['build']}.json"
        if path.name != expected and not (is_peer and path.parent.name == "write-flush"):
            problems.append(f"the file says chapter {doc['chapter']!r}, build {doc['build']!r}, "
                            f"so it should be named {expected}")
    return problems


def validate_file(path) -> dict:
    """Parses and validates one results file; raises ResultsError naming the file."""
    path = Path(path)
    doc = _read_json(path)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(f"{path}: not a workbook results file (schema is {got!r}, expected "
                           f"{SCHEMA_ID!r}); results directories hold only results files")
    problems = validate_doc(doc, path)
    if problems:
        raise ResultsError(f"{path}: malformed results file:\n  - " + "\n  - ".join(problems))
    return doc


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

@dataclass
class ResultsFile:
    path: Path
    doc: dict
    shadows: list = field(default_factory=list)  # same-named files in later directories

    @property
    def chapter(self) -> str:
        return self.doc["chapter"]

    @property
    def build(self) -> str:
        return self.doc["build"]

    @property
    def env(self) -> dict:
        return self.doc["environment"]

    @property
    def entries(self) -> list:
        return self.doc["results"]

    @property
    def copy_gbps(self) -> float:
        return float(self.env["ceilings"]["copy_gbps"])

    @property
    def synthetic(self) -> bool:
        return SYNTHETIC_MARK in self.env.get("gpu", "")

    def where(self, **match) -> list:
        """Entries whose keys equal the given values (a list value means 'any of')."""
        out = []
        for e in self.entries:
            ok = True
            for k, v in match.items():
                if isinstance(v, (list, tuple, set)):
                    ok = e.get(k) in v
                else:
                    ok = e.get(k) == v
                if not ok:
                    break
            if ok:
                out.append(e)
        return out


def default_results_path() -> list:
    local = REPO_ROOT / "results"
    dirs = []
    if local.is_dir() and any(local.glob("*.json")):
        dirs.append(local)
    dirs.append(REPO_ROOT / "data" / "results")
    return dirs


def results_path() -> list:
    env = os.environ.get("WB_RESULTS_PATH", "").strip()
    if not env:
        return default_results_path()
    return [Path(p) for p in env.split(os.pathsep) if p]


class ResultsSet:
    """Every results file on the results path; a name found earlier shadows later ones."""

    def __init__(self, dirs):
        self.dirs = [Path(d) for d in dirs]
        self.files: dict[str, ResultsFile] = {}
        problems = []
        for d in self.dirs:
            if not d.is_dir():
                problems.append(f"{d}: results directory does not exist")
                continue
            for p in sorted(d.glob("*.json")):
                try:
                    doc = validate_file(p)
                except ResultsError as e:
                    problems.append(str(e))
                    continue
                if p.name in self.files:
                    self.files[p.name].shadows.append(p)
                else:
                    self.files[p.name] = ResultsFile(p, doc)
        if problems:
            raise ResultsError("\n".join(problems))
        if not self.files:
            looked = ", ".join(str(d) for d in self.dirs)
            raise ResultsError(f"no results files found (looked in {looked}); run "
                               "`./workbook bench` or use the shipped data/results")

    def get(self, chapter: str, build: str = "solution"):
        """The file of a chapter ('04' or '04_fused_softmax') and build, or None."""
        for f in self.files.values():
            if f.build == build and (f.chapter == chapter or f.chapter.startswith(chapter + "_")):
                return f
        return None

    def chapters(self) -> list:
        return sorted({f.chapter for f in self.files.values() if not f.chapter.startswith("pytorch_")})

    def peers(self):
        for f in self.files.values():
            if f.chapter == "pytorch_peers":
                return f
        return None

    def sources_rows(self):
        rows = []
        for name, f in sorted(self.files.items()):
            rows.append([name, str(f.path.parent), f.env.get("gpu", "?"), f.doc["created_utc"],
                         f.env.get("git_revision", "?"), len(f.entries),
                         ", ".join(str(s.parent) for s in f.shadows) or ""])
        return rows

    def show_sources(self):
        show_table(["file", "read from", "GPU", "created (UTC)", "git", "entries", "shadows (not read)"],
                   self.sources_rows(),
                   caption="Results files read by this notebook (earlier directories win: "
                           + " > ".join(str(d) for d in self.dirs) + ")")


def load_results(dirs=None) -> ResultsSet:
    return ResultsSet(dirs if dirs is not None else results_path())


# --------------------------------------------------------------------------------------
# Shaping data for plots
# --------------------------------------------------------------------------------------

def parse_shape(shape: str, params=None):
    """'16x151936' -> (16, 151936); '1048576' -> (1048576,); '2^20' -> (1048576,).

    `params` (the entry itself, or its "params") wins when it says rows/cols or n.
    None when the size cannot be read."""
    for source in (params or {}, (params or {}).get("params") or {}):
        if not isinstance(source, dict):
            continue
        if "rows" in source and "cols" in source:
            return (int(source["rows"]), int(source["cols"]))
        for k in ("n", "numel", "elements"):
            if k in source:
                return (int(source[k]),)
    if re.fullmatch(r"\d+(x\d+)*", shape):
        return tuple(int(s) for s in shape.split("x"))
    m = re.fullmatch(r"2\^(\d+)", shape)
    if m:
        return (1 << int(m.group(1)),)
    return None


def elements(entry):
    dims = parse_shape(entry["shape"], entry)
    return math.prod(dims) if dims else None


# --------------------------------------------------------------------------------------
# Which chapters a notebook plots: from the chapter manifests (tests/NN_slug/chapter.json),
# their optional "plots" key (docs/CONTRACTS.md), so a new chapter needs no notebook change:
#   "plots": {"ladder": true}        its tokens/s and per-token breakdown join the transfer
#                                    ladder (01_transfer_ladder)
#   "plots": {"fusion": {"op": "softmax", "measures": "row softmax over ROWSxCOLS floats",
#                        "peer": "softmax", "flops_per_element": 5}}
#                                    its unfused/fused/copy sweep is drawn by 02_fusion as
#                                    `op`; "peer" names the PyTorch peer of
#                                    notebooks/peers/pytorch_peers.py (optional);
#                                    "flops_per_element" places it on the roofline (optional)
# --------------------------------------------------------------------------------------

TESTS_DIR = REPO_ROOT / "tests"


@dataclass
class FusionPlot:
    op: str         # the name on the figures, and the "op" of the peer entries
    chapter: str    # "04"
    measures: str   # what one call computes, for the figure's stamp
    peer: str | None
    flops_per_element: float | None = None  # for the roofline, when the bench records no flops


def manifests(tests_dir=None) -> list:
    """Every chapter manifest (parsed), by chapter id; a malformed one is an error naming it."""
    out = []
    for path in sorted(Path(tests_dir or TESTS_DIR).glob("*/chapter.json")):
        doc = _read_json(path)
        if not isinstance(doc, dict) or "id" not in doc or "slug" not in doc:
            raise ResultsError(f"{path}: not a chapter manifest (needs at least 'id' and 'slug')")
        plots = doc.get("plots", {})
        if not isinstance(plots, dict):
            raise ResultsError(f"{path}: 'plots' must be an object (docs/CONTRACTS.md)")
        out.append(doc)
    return sorted(out, key=lambda d: d["id"])


def ladder_chapters(tests_dir=None) -> tuple:
    """Chapter ids whose manifest says "plots": {"ladder": true}, in order."""
    return tuple(m["id"] for m in manifests(tests_dir) if m.get("plots", {}).get("ladder"))


def fusion_plots(tests_dir=None) -> list:
    """One FusionPlot per manifest with "plots": {"fusion": {...}}, in chapter order."""
    out = []
    for m in manifests(tests_dir):
        spec = m.get("plots", {}).get("fusion")
        if spec is None:
            continue
        if not isinstance(spec, dict) or not spec.get("op"):
            raise ResultsError(f"tests/{m['slug']}/chapter.json: plots.fusion needs an 'op' (docs/CONTRACTS.md)")
        out.append(FusionPlot(spec["op"], m["id"], spec.get("measures", spec["op"]), spec.get("peer"),
                              spec.get("flops_per_element")))
    return out


LADDER_CHAPTERS = ladder_chapters() if TESTS_DIR.is_dir() else ("01", "02", "03", "08")
LADDER_ORDER = ["cpu_1thread", "cpu_all_threads", "01_naive", "02_preallocated", "03_persistent",
                "08_step_by_step", "08_graph", "08_persistent"]
BREAKDOWN_ORDER = ["alloc", "h2d", "kernel", "d2h", "free"]
# The model the ladder compares on. Chapter 08's bench also decodes stories260K; those entries
# are drawn beside the ladder (capstone_rows), never mixed into it.
LADDER_SHAPE = "synthetic-110m"


@dataclass
class LadderStep:
    variant: str
    tokens_per_s: float
    breakdown_us: dict
    entry: dict
    file: ResultsFile


def ladder(results: ResultsSet, build: str = "solution", shape: str = LADDER_SHAPE) -> list:
    """The end-to-end ladder (entries with tokens_per_s, of one model) from the ladder
    chapters (01-03, 08) of one build.

    Chapter 03's bench runs the whole ladder (CPU, 01, 02, 03) in one process, and chapter
    08's runs the CPU, 03 and 08 again beside its own rungs, so the latest chapter file that
    has a variant wins; earlier chapters fill in what it lacks (the table says which file each
    rung came from). An entry without a shape counts as the ladder's model."""
    chosen = {}
    for chapter in ladder_chapters() if TESTS_DIR.is_dir() else LADDER_CHAPTERS:
        f = results.get(chapter, build)
        if f is None:
            continue
        for e in f.entries:
            if "tokens_per_s" in e and e.get("shape", shape) == shape:
                chosen[e["variant"]] = LadderStep(e["variant"], float(e["tokens_per_s"]),
                                                  dict(e.get("breakdown_us", {})), e, f)

    def rank(v):
        return (LADDER_ORDER.index(v) if v in LADDER_ORDER else len(LADDER_ORDER), v)

    return [chosen[v] for v in sorted(chosen, key=rank)]


# --------------------------------------------------------------------------------------
# Chapter 08, the capstone (the whole token loop on the GPU), and its PyTorch peer
# (notebooks/peers/pytorch_decode.py). Every name the notebooks read from their results is
# here, in one place; an entry or key that is missing is skipped, never an error.
# --------------------------------------------------------------------------------------

CAPSTONE_CHAPTER = "08"
# 08_persistent: the decoder's own persistent kernel (tests/08_token_loop/persistent_step.hpp),
# the step after the graph; it has no stage_us (one kernel), its plan instead (persistent_*).
CAPSTONE_VARIANTS = ("08_step_by_step", "08_graph", "08_persistent")
CAPSTONE_SHAPES = ("synthetic-110m", "stories260K")
STAGE_KEY = "stage_us"  # µs per step by stage: each stage's launches as a graph of their own, replayed
STAGE_ORDER = ("embed_norm", "matvec", "rope", "attention", "swiglu", "sampler")
STAGE_TOTAL = "total"   # the bench's sum of the stages: not a stage of its own
WEIGHT_BYTES_KEY = "weight_bytes_per_token"
ROOFLINE_KEY = "roofline_tokens_per_s"  # weight bytes per token at the run's measured bandwidth
ROOFLINE_CEILING_KEY = "roofline_ceiling"  # which ceiling the bench used: read_gbps, else copy_gbps
DECODE_PEER = "pytorch_decode"
DECODE_PEER_VARIANTS = ("pytorch_eager", "pytorch_graph", "pytorch_compile")
# The rungs drawn against the roofline, in order (whichever of them the results have).
ROOFLINE_VARIANTS = ("cpu_all_threads", "03_persistent") + CAPSTONE_VARIANTS + DECODE_PEER_VARIANTS


@dataclass
class DecodeRow:
    variant: str
    shape: str
    tokens_per_s: float
    weight_bytes: float | None    # weight bytes one token reads (None when no file says)
    roofline_tps: float | None    # weight bytes per token at the file's measured copy bandwidth
    entry: dict
    file: ResultsFile

    @property
    def fraction_of_roofline(self) -> float | None:
        return self.tokens_per_s / self.roofline_tps if self.roofline_tps else None


def peer_file(results: ResultsSet, name: str = DECODE_PEER):
    """A PyTorch peer file by its chapter name (pytorch_decode), or None."""
    for f in results.files.values():
        if f.chapter == name:
            return f
    return None


def capstone_rows(results: ResultsSet, shape: str, build: str = "solution") -> list:
    """tokens/s of every ROOFLINE_VARIANTS rung of one model: the ladder chapters' latest entry
    of each (as ladder() picks them) and the PyTorch peer's, with the roofline of each.

    The roofline is the entry's own (ROOFLINE_KEY, at the ceiling ROOFLINE_CEILING_KEY names)
    when it has one; else the weight bytes per token (the entry's, else any other entry's of
    the same model: it is the model's size, not a measurement) over its file's measured read
    bandwidth, else its copy bandwidth (as the chapter 08 bench does)."""
    rows = {}
    for chapter in ladder_chapters() if TESTS_DIR.is_dir() else LADDER_CHAPTERS:
        f = results.get(chapter, build)
        if f is None:
            continue
        for e in f.entries:
            if e.get("variant") in ROOFLINE_VARIANTS and "tokens_per_s" in e and e.get("shape", LADDER_SHAPE) == shape:
                rows[e["variant"]] = (e, f)
    peer = peer_file(results)
    if peer is not None:
        for e in peer.entries:
            if e.get("variant") in DECODE_PEER_VARIANTS and "tokens_per_s" in e and e.get("shape") == shape:
                rows[e["variant"]] = (e, peer)
    sizes = [e[WEIGHT_BYTES_KEY] for e, _ in rows.values() if e.get(WEIGHT_BYTES_KEY)]
    model_bytes = float(sizes[0]) if sizes else None
    out = []
    for v in ROOFLINE_VARIANTS:
        if v not in rows:
            continue
        e, f = rows[v]
        wbytes = float(e[WEIGHT_BYTES_KEY]) if e.get(WEIGHT_BYTES_KEY) else model_bytes
        roof = e.get(ROOFLINE_KEY)
        ceilings = f.env.get("ceilings", {})
        gbps = ceilings.get("read_gbps") or ceilings.get("copy_gbps")
        if not roof and wbytes and gbps:
            roof = float(gbps) * 1e9 / wbytes
        out.append(DecodeRow(v, shape, float(e["tokens_per_s"]), wbytes, float(roof) if roof else None, e, f))
    return out


def capstone_stages(results: ResultsSet, shape: str = LADDER_SHAPE, build: str = "solution") -> list:
    """(variant, {stage: µs per token}, entry, file) of the chapter 08 entries of one model
    that carry STAGE_KEY; stages in STAGE_ORDER, then any others the bench added. The bench
    measures the stages once per model and writes them into both modes' entries, so an entry
    that repeats an earlier one's is left out."""
    f = results.get(CAPSTONE_CHAPTER, build)
    if f is None:
        return []
    out = []
    for e in f.entries:
        stages = e.get(STAGE_KEY)
        if e.get("shape") != shape or not isinstance(stages, dict) or not stages:
            continue
        ordered = {k: float(stages[k]) for k in STAGE_ORDER if isinstance(stages.get(k), (int, float))}
        ordered.update({k: float(v) for k, v in stages.items()
                        if k not in ordered and k != STAGE_TOTAL and isinstance(v, (int, float))})
        if any(ordered == seen for _, seen, _, _ in out):
            continue
        out.append((e["variant"], ordered, e, f))
    return out


def breakdown_keys(steps) -> list:
    keys = [k for k in BREAKDOWN_ORDER if any(s.breakdown_us.get(k, 0) > 0 for s in steps)]
    extra = sorted({k for s in steps for k, v in s.breakdown_us.items() if v > 0} - set(keys))
    return keys + extra


@dataclass
class Point:
    shape: str
    elements: int
    entry: dict

    def __getattr__(self, key):
        try:
            return self.entry[key]
        except KeyError:
            raise AttributeError(key) from None


def sweep(f: ResultsFile, variant: str, op: str | None = None, impl: str | None = None,
          cache: str | None = None) -> list:
    """The harness entries of one variant (optionally one op, impl, cache), sorted by size."""
    pts = []
    for e in f.entries:
        if e.get("variant") != variant or not is_harness(e):
            continue
        if op is not None and e.get("op", op) != op:
            continue
        if impl is not None and e.get("impl") != impl:
            continue
        if cache is not None and e.get("cache") != cache:
            continue
        n = elements(e)
        if n is not None:
            pts.append(Point(e["shape"], n, e))
    return sorted(pts, key=lambda p: p.elements)


def harness_series(f: ResultsFile, impl: str | None = None) -> list:
    """(variant, cache) pairs of the file's harness entries, in order of appearance."""
    seen = []
    for e in f.entries:
        key = (e["variant"], e.get("cache"))
        if is_harness(e) and (impl is None or e["impl"] == impl) and key not in seen:
            seen.append(key)
    return seen


# Nominal FP32 lanes per SM by compute capability (for the roofline's compute roof only;
# it is a datasheet number, and the figures say so).
_FP32_LANES = {"7": 64, "8.0": 64, "8": 128, "9": 128, "10": 128, "11": 128, "12": 128}


def nominal_fp32_gflops(env) -> float | None:
    cc = env.get("compute_capability", "")
    lanes = _FP32_LANES.get(cc) or _FP32_LANES.get(cc.split(".")[0])
    clock = env.get("sm_clock_mhz") or 0
    if not lanes or not clock:
        return None
    return env["sm_count"] * lanes * 2 * clock / 1e3  # FMA = 2 flop


# --------------------------------------------------------------------------------------
# Gradebook (from `./workbook grade-all`)
# --------------------------------------------------------------------------------------

_CHAPTER_COL = re.compile(r"^(?:ch)?(\d{2})(?:[_\- .](.*))?$", re.IGNORECASE)


@dataclass
class Gradebook:
    path: Path
    rows: list                 # dicts: student, status, total, max_total, gpu, points{NN}, max{NN}, speedup{NN}
    chapters: list             # 'NN' with a points column
    speedup_chapters: list     # 'NN' with a speedup column
    has_max: bool
    gpus: list
    reports_read: int = 0      # students/<name>/report.json files that filled speedups / GPU


def _num(text):
    text = (text or "").strip().rstrip("%")
    if text == "" or text.lower() in ("na", "n/a", "nan", "-", "none"):
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def is_demo_gradebook(path) -> bool:
    """The shipped demo gradebook (data/results/gradebook-demo.csv): made-up students."""
    return "demo" in Path(path).stem.lower()


def find_gradebook(dirs=None):
    env = os.environ.get("WB_GRADEBOOK", "").strip()
    if env:
        p = Path(env)
        if not p.is_file():
            raise ResultsError(f"{p}: gradebook not found (WB_GRADEBOOK / --gradebook)")
        return p
    for d in dirs if dirs is not None else results_path():
        hits = sorted(Path(d).glob("gradebook*.csv"))
        if hits:
            return hits[0]
    return None


def read_gradebook(path) -> Gradebook:
    """Reads a gradebook CSV tolerantly; see docs/results-schema.md for the columns."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ResultsError(f"{path}: cannot read the gradebook ({e.strerror})") from None
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise ResultsError(f"{path}: the gradebook is empty (no header line)")
    cols = {h.strip().lower(): h for h in reader.fieldnames if h}
    student_col = next((cols[k] for k in ("student", "name", "submission", "id") if k in cols), None)
    if student_col is None:
        raise ResultsError(f"{path}: the gradebook has no 'student' column "
                           f"(columns: {', '.join(reader.fieldnames)})")
    total_col = next((cols[k] for k in ("total", "score", "points") if k in cols), None)
    max_col = next((cols[k] for k in ("max_score", "max_total", "total_max", "max", "max_points", "possible")
                    if k in cols), None)
    status_col = cols.get("status")
    gpu_col = next((cols[k] for k in ("gpu", "device") if k in cols), None)
    points, maxes, speedups = {}, {}, {}
    for h in reader.fieldnames:
        m = _CHAPTER_COL.match((h or "").strip())
        if not m:
            continue
        nn, rest = m.group(1), (m.group(2) or "").lower()
        if "speedup" in rest:
            speedups[nn] = h
        elif rest in ("max", "max_points", "possible") or rest.endswith("_max"):
            maxes[nn] = h
        elif "status" in rest:
            continue
        else:
            points.setdefault(nn, h)
    rows = []
    for line, r in enumerate(reader, start=2):
        name = (r.get(student_col) or "").strip()
        if not name:
            continue
        row = {"student": name,
               "status": (r.get(status_col) or "").strip() if status_col else "",
               "gpu": (r.get(gpu_col) or "").strip() if gpu_col else "",
               "points": {nn: _num(r.get(h)) for nn, h in points.items()},
               "max": {nn: _num(r.get(h)) for nn, h in maxes.items()},
               "speedup": {nn: _num(r.get(h)) for nn, h in speedups.items()}}
        total = _num(r.get(total_col)) if total_col else None
        if total is None and row["points"]:
            total = sum(v for v in row["points"].values() if v is not None)
        row["total"] = total
        row["max_total"] = _num(r.get(max_col)) if max_col else (
            sum(v for v in row["max"].values() if v is not None) if row["max"] else None)
        rows.append(row)
    if not rows:
        raise ResultsError(f"{path}: the gradebook has a header but no students")
    reports = 0
    if not speedups or not gpu_col:
        reports = _fill_from_reports(path, rows, need_speedups=not speedups, need_gpu=not gpu_col)
    speedup_chapters = sorted({nn for r in rows for nn, v in r["speedup"].items() if v})
    return Gradebook(path, rows, sorted(points), speedup_chapters if not speedups else sorted(speedups),
                     any(r["max_total"] for r in rows),
                     sorted({r["gpu"] for r in rows if r["gpu"]}), reports)


def _fill_from_reports(path: Path, rows, need_speedups: bool, need_gpu: bool) -> int:
    """Speedups and the GPU from each student's report.json, which `grade-all` keeps beside the
    gradebook (students/<student>/report.json): the GPU is grader.device; a chapter's speedup
    is the median of the speedup* metrics its timing tests recorded. Returns how many reports
    were read; unreadable ones are skipped (the gradebook itself stays the source of scores)."""
    read = 0
    for row in rows:
        report = path.parent / "students" / row["student"] / "report.json"
        try:
            doc = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        read += 1
        if need_gpu and isinstance(doc.get("grader"), dict) and isinstance(doc["grader"].get("device"), str):
            row["gpu"] = doc["grader"]["device"]
        if not need_speedups:
            continue
        for chapter in doc.get("chapters", []) if isinstance(doc.get("chapters"), list) else []:
            values = [v for kind in chapter.get("kinds", []) for test in kind.get("tests", [])
                      for k, v in (test.get("metrics") or {}).items()
                      if k.startswith("speedup") and isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
            if values and chapter.get("id"):
                values.sort()
                row["speedup"][str(chapter["id"])] = values[len(values) // 2]
    return read


# --------------------------------------------------------------------------------------
# Figures: every one says what GPU, what was measured and the baseline
# --------------------------------------------------------------------------------------

_notebook = None


def setup(name: str | None = None):
    """Call once at the top of a notebook: names its figure folder and sets the style."""
    global _notebook
    _notebook = os.environ.get("WB_NOTEBOOK") or name or "notebook"
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 130, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
                         "font.size": 10, "legend.fontsize": 9})


# What must match for numbers from two results files to be compared directly: the same GPU
# model and software, and the same code. The measured ceilings are *not* part of it: every
# bench run measures its own copy bandwidth and launch latency, so two runs on one GPU at one
# revision differ there by a few percent, and that is no reason to warn.
RUN_IDENTITY_KEYS = ("gpu", "compute_capability", "sm_count", "runtime_version", "driver_version",
                     "git_revision")


def env_summary(env: dict) -> str:
    """The GPU and software of a run, without its measured ceilings (see RUN_IDENTITY_KEYS)."""
    parts = [env.get("gpu", "?")]
    if env.get("compute_capability"):
        parts.append(f"cc {env['compute_capability']}")
    if env.get("sm_count"):
        parts.append(f"{env['sm_count']} SMs")
    if env.get("runtime_version"):
        parts.append(f"CUDA {env['runtime_version']}")
    if env.get("driver_version"):
        parts.append(f"driver {env['driver_version']}")
    if env.get("git_revision"):
        parts.append(f"git {env['git_revision']}")
    return " · ".join(parts)


def comparison_warning(files) -> str | None:
    """A warning when the files come from different GPUs, software or revisions; else None."""
    identities = {tuple(str(f.env.get(k, "")) for k in RUN_IDENTITY_KEYS) for f in files if f is not None}
    if len(identities) <= 1:
        return None
    gpus = {i[0] for i in identities}
    revisions = {i[-1] for i in identities}
    what = ("different GPUs" if len(gpus) > 1 else
            "different code revisions" if len(revisions) > 1 else "different CUDA versions or drivers")
    return f"WARNING: these results come from {what}; compare with care."


def ceilings_text(files) -> str | None:
    """The measured copy ceiling(s) of the files: one value, or the range over the runs."""
    values = sorted({round(f.copy_gbps) for f in files if f is not None and f.env.get("ceilings", {}).get("copy_gbps")})
    if not values:
        return None
    if len(values) == 1:
        return f"measured copy ceiling {values[0]} GB/s"
    return (f"measured copy ceiling {values[0]}-{values[-1]} GB/s "
            f"(each of the {len(values)} runs measures its own)")


def stamp(fig, files, measured: str, baseline: str, gpu: str | None = None, sources=()):
    """Writes GPU, what was measured, the baseline and the source files under the figure.

    files: the ResultsFiles the figure was drawn from (their environments name the GPU);
    gpu/sources: for figures not drawn from results files (the gradebook)."""
    files = [f for f in files if f is not None]
    summaries = []
    for f in files:
        s = env_summary(f.env)
        if s not in summaries:
            summaries.append(s)
    lines = [f"GPU: {s}" for s in summaries]
    ceilings = ceilings_text(files)
    if ceilings and lines:
        lines[-1] += f" · {ceilings}"
    if gpu:
        lines.append(f"GPU: {gpu}")
    warning = comparison_warning(files)
    if warning:
        lines.append(warning)
    lines.append(f"Measured: {measured}")
    lines.append(f"Baseline: {baseline}")
    lines.append("Source: " + _sources_text([f.path for f in files] + list(sources)))
    wrapped = [w for line in lines for w in textwrap.wrap(line, 150, subsequent_indent="    ")]
    # Below everything already drawn (tick labels, axis labels): call stamp() last, just
    # before save(). Figure coordinates, so that savefig(bbox_inches="tight") keeps it.
    fig.draw_without_rendering()
    box = fig.get_tightbbox()  # inches
    width, height = fig.get_size_inches()
    fig.text(box.x0 / width, (box.y0 - 0.12) / height, "\n".join(wrapped),
             ha="left", va="top", fontsize=8, color="#333333")
    if any(f.synthetic for f in files) or any(SYNTHETIC_MARK.lower() in str(p).lower() or "sample-results" in str(p)
                                              for p in sources):
        fig.text(0.5, 0.5, "SYNTHETIC TEST DATA\nnot a measurement", ha="center", va="center",
                 fontsize=30, color="red", alpha=0.18, rotation=20, transform=fig.transFigure)


def plain_log_axis(ax, axis: str = "y", suffix: str = ""):
    """Log-scale tick labels as plain numbers (2×, 50×) instead of 2×10^0."""
    from matplotlib.ticker import FuncFormatter
    fmt_tick = FuncFormatter(lambda v, _: f"{v:g}{suffix}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(fmt_tick)
    target.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}" if f"{v:.0e}"[0] in "25" else ""))


def _sources_text(paths) -> str:
    """'data/results/: a.json, b.json' (files grouped by folder, in order of appearance)."""
    groups = {}
    for p in paths:
        short = Path(_short(p))
        groups.setdefault(str(short.parent), []).append(short.name)
    return "; ".join(f"{folder}/: {', '.join(dict.fromkeys(names))}" for folder, names in groups.items())


def fmt(value: float) -> str:
    """A number for a label: 3 significant digits, no exponent below a million."""
    if value >= 1e6:
        return f"{value:.3g}"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _short(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def save(fig, name: str):
    """Saves the figure as PNG into the report's figure folder (when there is one), shows it."""
    import matplotlib.pyplot as plt
    out = os.environ.get("WB_REPORT_DIR")
    path = None
    if out:
        folder = Path(out) / "figures" / (_notebook or "notebook")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.png"
        fig.savefig(path, bbox_inches="tight")
    plt.show()
    plt.close(fig)
    return path


def _display_html(text: str):
    try:
        from IPython.display import HTML, display
        display(HTML(text))
    except ImportError:  # outside Jupyter
        print(re.sub(r"<[^>]+>", "", text))


def heading(text: str):
    """A section heading inside a code cell's output (for sections made in a loop)."""
    _display_html(f"<h2>{html.escape(text)}</h2>")


def note(text: str):
    """A visible note in the rendered notebook (missing data, caveats)."""
    _display_html('<div style="border-left:4px solid #d08c00;background:#fff8e6;padding:6px 10px;'
                  f'margin:6px 0">{html.escape(text)}</div>')


def show_table(headers, rows, caption: str = ""):
    def cell(v):
        if isinstance(v, float):
            v = f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        return html.escape(str(v))
    out = ['<table style="border-collapse:collapse;font-size:90%">']
    if caption:
        out.append(f'<caption style="text-align:left;font-weight:bold">{html.escape(caption)}</caption>')
    out.append("<tr>" + "".join(f'<th style="border-bottom:1px solid #999;padding:2px 8px">{html.escape(str(h))}</th>'
                                for h in headers) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td style="padding:2px 8px">{cell(v)}</td>' for v in r) + "</tr>")
    out.append("</table>")
    _display_html("".join(out))


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------

def _validate_cli(paths) -> int:
    bad = 0
    count = 0
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            files = sorted(p.glob("*.json"))
            if not files:
                print(f"note  {p}: no results files here")
        elif p.exists():
            files = [p]
        else:
            print(f"error {p}: no such file or directory")
            bad += 1
            continue
        for f in files:
            count += 1
            try:
                doc = validate_file(f)
            except ResultsError as e:
                print(f"error {e}")
                bad += 1
                continue
            print(f"ok    {f} ({doc['chapter']}, {doc['build']}, {len(doc['results'])} entries, "
                  f"{doc['environment']['gpu']})")
    if bad:
        print(f"{bad} problem(s) found; rerun `./workbook bench` for that chapter or remove the file")
        return 1
    return 0


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "validate":
        try:
            return _validate_cli(argv[1:])
        except ResultsError as e:  # jsonschema missing
            print(f"error {e}")
            return 2
    print(__doc__.strip().splitlines()[-1].strip())
    print("usage: python3 wbplots.py validate DIR_OR_FILE...")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
