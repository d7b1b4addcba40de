#!/usr/bin/env python3
"""CTest notebooks.unit: the notebooks' loader and validator (notebooks/wbplots.py), the peer
script's sweep, the committed notebooks (no outputs) and the fixtures (reproducible)."""
import copy
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from nbtest_common import FIXTURES, HERE, NOTEBOOKS, REPO, require_modules

require_modules(("jsonschema",))
import wbplots  # noqa: E402

GOOD = FIXTURES / "results"


def load(name):
    return json.loads((GOOD / name).read_text())


def write(folder: Path, name: str, doc) -> Path:
    path = folder / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


class Validation(unittest.TestCase):
    def test_every_fixture_is_valid(self):
        for path in sorted(GOOD.glob("*.json")):
            with self.subTest(path=path.name):
                wbplots.validate_file(path)

    def test_every_malformed_fixture_is_rejected_naming_the_file(self):
        expected = {
            "truncated": "not valid JSON", "empty": "empty", "wrong_schema": "not a workbook results file",
            "missing_stat": "'p25_us' is a required property", "out_of_order": "out of order",
            "duplicate": "measured twice", "misnamed": "should be named", "nan": "NaN",
            "no_ceilings": "'ceilings' is a required property",
        }
        cases = sorted(p.name for p in (FIXTURES / "malformed").iterdir())
        self.assertEqual(sorted(expected), cases, "a malformed fixture without an expectation, or the reverse")
        for case, phrase in expected.items():
            path = next((FIXTURES / "malformed" / case).glob("*.json"))
            with self.subTest(case=case):
                with self.assertRaises(wbplots.ResultsError) as ctx:
                    wbplots.validate_file(path)
                self.assertIn(str(path), str(ctx.exception))
                self.assertIn(phrase, str(ctx.exception))

    def test_schema_errors_say_which_entry(self):
        doc = load("04_fused_softmax-solution.json")
        doc["results"][5]["median_us"] = -1.0
        with tempfile.TemporaryDirectory() as d:
            path = write(Path(d), "04_fused_softmax-solution.json", doc)
            with self.assertRaises(wbplots.ResultsError) as ctx:
                wbplots.validate_file(path)
        e = doc["results"][5]
        self.assertIn(f"results[5] (variant {e['variant']!r}, shape {e['shape']!r}).median_us", str(ctx.exception))

    def test_metrics_entries_need_not_carry_every_statistic(self):
        # Chapter 00's bench records the student's timer as {"median_us": ...} alone.
        doc = load("00_measure_right-solution.json")
        doc["results"].append({"variant": "extra", "impl": "solution", "shape": "1", "median_us": 3.0})
        self.assertEqual([], wbplots.validate_doc(doc, Path("00_measure_right-solution.json")))

    def test_a_harness_entry_must_carry_every_statistic(self):
        doc = load("04_fused_softmax-solution.json")
        del doc["results"][0]["floor_us"]
        problems = wbplots.validate_doc(doc, Path("04_fused_softmax-solution.json"))
        self.assertTrue(any("'floor_us' is a required property" in p for p in problems), problems)

    def test_peer_file_needs_no_chapter_name(self):
        wbplots.validate_file(GOOD / "pytorch_peers.json")


class Loading(unittest.TestCase):
    def test_earlier_directories_win_file_by_file(self):
        with tempfile.TemporaryDirectory() as d:
            local = Path(d)
            doc = load("04_fused_softmax-solution.json")
            doc["environment"]["host"] = "local-run"
            write(local, "04_fused_softmax-solution.json", doc)
            rs = wbplots.load_results([local, GOOD])
            f = rs.get("04", "solution")
            self.assertEqual("local-run", f.env["host"])
            self.assertEqual([GOOD / "04_fused_softmax-solution.json"], f.shadows)
            self.assertEqual(GOOD, rs.get("05", "solution").path.parent)  # not shadowed: read from GOOD

    def test_a_malformed_local_file_stops_loading(self):
        with tempfile.TemporaryDirectory() as d:
            bad = write(Path(d), "04_fused_softmax-solution.json", "{")
            with self.assertRaises(wbplots.ResultsError) as ctx:
                wbplots.load_results([Path(d), GOOD])
            self.assertIn(str(bad), str(ctx.exception))

    def test_missing_and_empty_directories(self):
        with self.assertRaises(wbplots.ResultsError) as ctx:
            wbplots.load_results([Path("/nonexistent/results")])
        self.assertIn("/nonexistent/results: results directory does not exist", str(ctx.exception))
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(wbplots.ResultsError) as ctx:
                wbplots.load_results([Path(d)])
            self.assertIn("no results files found", str(ctx.exception))

    def test_results_path_from_the_environment(self):
        import os
        old = os.environ.get("WB_RESULTS_PATH")
        try:
            os.environ["WB_RESULTS_PATH"] = os.pathsep.join(["/a", "/b"])
            self.assertEqual([Path("/a"), Path("/b")], wbplots.results_path())
        finally:
            if old is None:
                os.environ.pop("WB_RESULTS_PATH", None)
            else:
                os.environ["WB_RESULTS_PATH"] = old


class Shaping(unittest.TestCase):
    def test_shapes(self):
        self.assertEqual((16, 151936), wbplots.parse_shape("16x151936"))
        self.assertEqual((1 << 20,), wbplots.parse_shape("2^20"))
        self.assertEqual((1048576,), wbplots.parse_shape("1048576"))
        self.assertEqual((4, 8), wbplots.parse_shape("anything", {"rows": 4, "cols": 8}))
        self.assertEqual((12,), wbplots.parse_shape("anything", {"params": {"n": 12}}))
        self.assertIsNone(wbplots.parse_shape("synthetic-110m"))

    def test_sweep_is_sorted_and_split_by_cache(self):
        f = wbplots.load_results([GOOD]).get("01", "solution")
        cold = wbplots.sweep(f, "matvec", cache="cold")
        hot = wbplots.sweep(f, "matvec", cache="hot")
        self.assertEqual(4, len(cold))
        self.assertEqual(4, len(hot))
        self.assertEqual(sorted(p.elements for p in cold), [p.elements for p in cold])
        self.assertEqual({"cold"}, {p.cache for p in cold})

    def test_ladder_prefers_the_latest_chapter_and_orders_the_rungs(self):
        rs = wbplots.load_results([GOOD])
        steps = wbplots.ladder(rs, "solution")
        self.assertEqual(["cpu_1thread", "cpu_all_threads", "01_naive", "02_preallocated", "03_persistent",
                          "08_step_by_step", "08_graph"], [s.variant for s in steps])
        # chapter 08's bench runs cpu_all_threads and 03 again: its entries win over chapter 03's
        self.assertEqual({"cpu_1thread": "03_persistent_weights", "cpu_all_threads": "08_token_loop",
                          "01_naive": "03_persistent_weights", "02_preallocated": "03_persistent_weights",
                          "03_persistent": "08_token_loop", "08_step_by_step": "08_token_loop",
                          "08_graph": "08_token_loop"}, {s.variant: s.file.chapter for s in steps})
        self.assertEqual({"synthetic-110m"}, {s.entry["shape"] for s in steps}, "one model per ladder")

    def test_ladder_without_chapter_08_is_the_01_03_ladder(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("01_naive_matvec-solution.json", "02_preallocated-solution.json",
                         "03_persistent_weights-solution.json"):
                write(Path(d), name, load(name))
            rs = wbplots.load_results([d])
            steps = wbplots.ladder(rs, "solution")
            self.assertEqual(["cpu_1thread", "cpu_all_threads", "01_naive", "02_preallocated", "03_persistent"],
                             [s.variant for s in steps])
            self.assertEqual([], wbplots.capstone_stages(rs))
            rows = wbplots.capstone_rows(rs, "synthetic-110m")
            self.assertEqual(["cpu_all_threads", "03_persistent"], [r.variant for r in rows])
            self.assertTrue(all(r.roofline_tps is None for r in rows), "no weight bytes known: no roofline")
            self.assertEqual([], wbplots.capstone_rows(rs, "stories260K"))

    def test_capstone_rows_stages_and_roofline(self):
        rs = wbplots.load_results([GOOD])
        rows = {r.variant: r for r in wbplots.capstone_rows(rs, "stories260K")}
        self.assertEqual(["cpu_all_threads", "03_persistent", "08_step_by_step", "08_graph", "pytorch_eager",
                          "pytorch_graph", "pytorch_compile"], list(rows))
        self.assertEqual("pytorch_decode", rows["pytorch_graph"].file.chapter)
        g = rows["08_graph"]
        self.assertAlmostEqual(g.entry["roofline_tokens_per_s"], g.roofline_tps)
        self.assertAlmostEqual(g.tokens_per_s / g.roofline_tps, g.fraction_of_roofline)
        # an entry without its own weight bytes or roofline borrows the model's size
        cpu = rows["cpu_all_threads"]
        self.assertEqual(g.weight_bytes, cpu.weight_bytes)
        self.assertAlmostEqual(cpu.file.copy_gbps * 1e9 / g.weight_bytes, cpu.roofline_tps)  # no read_gbps there
        stages = wbplots.capstone_stages(rs, "synthetic-110m")
        self.assertEqual(["08_step_by_step"], [v for v, _, _, _ in stages], "the same step's stages once")
        self.assertEqual(list(wbplots.STAGE_ORDER), list(stages[0][1]), "the bench's 'total' is not a stage")

    def test_ladder_fills_in_from_earlier_chapters(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            doc = load("03_persistent_weights-solution.json")
            doc["results"] = [e for e in doc["results"] if e["variant"] != "01_naive"]
            write(d, "03_persistent_weights-solution.json", doc)
            write(d, "01_naive_matvec-solution.json", load("01_naive_matvec-solution.json"))
            steps = {s.variant: s for s in wbplots.ladder(wbplots.load_results([d]), "solution")}
        self.assertEqual("01_naive_matvec", steps["01_naive"].file.chapter)
        self.assertEqual("03_persistent_weights", steps["cpu_1thread"].file.chapter)

    def test_nominal_peak(self):
        env = {"compute_capability": "9.0", "sm_count": 132, "sm_clock_mhz": 1980}
        self.assertAlmostEqual(132 * 128 * 2 * 1.98, wbplots.nominal_fp32_gflops(env))  # GFLOP/s at 1.98 GHz
        self.assertIsNone(wbplots.nominal_fp32_gflops(dict(env, sm_clock_mhz=0)))


class Gradebook(unittest.TestCase):
    def read(self, text):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "gradebook.csv"
            path.write_text(text, encoding="utf-8")
            return wbplots.read_gradebook(path), path

    def test_grade_all_output_with_its_reports(self):
        gb = wbplots.read_gradebook(FIXTURES / "grade-all" / "gradebook.csv")
        self.assertEqual(24, len(gb.rows))
        self.assertEqual(["00", "01", "02", "03", "04", "05"], gb.chapters)
        self.assertTrue(gb.has_max)  # max_score
        self.assertEqual(24, gb.reports_read)
        self.assertEqual(["04", "05"], gb.speedup_chapters)  # from the reports' speedup metrics
        self.assertEqual([wbplots.SYNTHETIC_MARK], [g.split(" ")[0] for g in gb.gpus])
        report = json.loads((FIXTURES / "grade-all" / "students" / "student00" / "report.json").read_text())
        values = sorted(t["metrics"]["speedup_vs_unfused"] for c in report["chapters"] if c["id"] == "04"
                        for k in c["kinds"] for t in k["tests"])
        if values:
            self.assertEqual(values[len(values) // 2], gb.rows[0]["speedup"]["04"])

    def test_without_reports_the_csv_alone_is_enough(self):
        text = (FIXTURES / "grade-all" / "gradebook.csv").read_text()
        gb, _ = self.read(text)
        self.assertEqual(0, gb.reports_read)
        self.assertEqual([], gb.speedup_chapters)
        self.assertEqual(24, len(gb.rows))

    def test_tolerant_columns(self):
        gb, _ = self.read("\ufeffName,ch01,04_points,04_max,04_speedup,Status,GPU\n"
                          "ann,3,7,10,2.5,graded,NVIDIA H200\nbob,,n/a,10,,timeout,NVIDIA H200\n\n")
        self.assertEqual(["01", "04"], gb.chapters)
        self.assertEqual(["04"], gb.speedup_chapters)
        self.assertEqual(10.0, gb.rows[0]["total"])  # no total column: the sum of the chapters
        self.assertEqual(10.0, gb.rows[0]["max_total"])
        self.assertIsNone(gb.rows[1]["points"]["04"])
        self.assertEqual(["NVIDIA H200"], gb.gpus)

    def test_bad_gradebooks_name_the_file(self):
        for text, phrase in [("", "empty"), ("total,status\n1,graded\n", "no 'student' column"),
                             ("student,total\n", "no students")]:
            with self.subTest(phrase=phrase):
                with self.assertRaises(wbplots.ResultsError) as ctx:
                    self.read(text)
                self.assertIn("gradebook.csv", str(ctx.exception))
                self.assertIn(phrase, str(ctx.exception))


class Repository(unittest.TestCase):
    def test_notebooks_are_committed_without_outputs(self):
        notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
        self.assertGreaterEqual(len(notebooks), 4)
        for nb_path in notebooks:
            nb = json.loads(nb_path.read_text())
            for i, cell in enumerate(nb["cells"]):
                if cell["cell_type"] == "code":
                    with self.subTest(notebook=nb_path.name, cell=i):
                        self.assertEqual([], cell["outputs"], "clear the outputs before committing")
                        self.assertIsNone(cell["execution_count"])

    def test_fixtures_are_what_the_generator_writes(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, str(HERE / "make_sample_results.py"), d], check=True, capture_output=True)
            made = {p.relative_to(d): p.read_bytes() for p in Path(d).rglob("*") if p.is_file()}
        committed = {p.relative_to(FIXTURES): p.read_bytes() for p in FIXTURES.rglob("*") if p.is_file()}
        self.assertEqual(sorted(made), sorted(committed), "rerun tests/notebooks/make_sample_results.py")
        for rel, data in made.items():
            self.assertEqual(data, committed[rel], f"{rel} differs: rerun tests/notebooks/make_sample_results.py")

    def test_fixtures_are_labelled_synthetic(self):
        for path in GOOD.glob("*.json"):
            self.assertIn(wbplots.SYNTHETIC_MARK, json.loads(path.read_text())["environment"]["gpu"])

    def test_peer_sweep_follows_the_chapter_results(self):
        r = subprocess.run([sys.executable, str(REPO / "notebooks/peers/pytorch_peers.py"),
                            "--sweep-from", str(GOOD), "--dry-run"], capture_output=True, text=True, check=True)
        shapes = [line.split()[:2] for line in r.stdout.splitlines()]
        ch04 = {e["shape"] for e in load("04_fused_softmax-solution.json")["results"] if e["variant"] == "fused"}
        ch05 = {e["shape"] for e in load("05_fused_gelu-solution.json")["results"] if e["variant"] == "fused"}
        self.assertEqual(ch04, {s for op, s in shapes if op == "softmax"})
        self.assertEqual(ch05, {s for op, s in shapes if op == "gelu"})
        self.assertIn("the shapes of", r.stderr)

    def test_stamp_puts_gpu_measured_and_baseline_on_the_figure(self):
        require_modules(("matplotlib",))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        f = wbplots.load_results([GOOD]).get("04", "solution")
        fig, ax = plt.subplots()
        ax.plot([1, 2], [1, 2])
        wbplots.stamp(fig, [f], measured="M-TEXT", baseline="B-TEXT")
        text = "\n".join(t.get_text() for t in fig.texts)
        plt.close(fig)
        for needle in ("GPU: SYNTHETIC FIXTURE", "Measured: M-TEXT", "Baseline: B-TEXT",
                       "04_fused_softmax-solution.json", "SYNTHETIC TEST DATA"):
            self.assertIn(needle, text)


class Comparability(unittest.TestCase):
    """The stamp warns when results come from different GPUs or revisions, and only then."""

    @staticmethod
    def file(name="04_fused_softmax-solution.json", **env):
        doc = copy.deepcopy(load(name))
        for key, value in env.items():
            if key == "copy_gbps":
                doc["environment"]["ceilings"]["copy_gbps"] = value
            else:
                doc["environment"][key] = value
        return wbplots.ResultsFile(Path(name), doc)

    def test_one_gpu_one_revision_different_ceilings_is_no_warning(self):
        # Every bench run measures its own ceilings: a few percent apart on one GPU.
        a = self.file(copy_gbps=4171.0)
        b = self.file("05_fused_gelu-solution.json", copy_gbps=4253.0)
        self.assertIsNone(wbplots.comparison_warning([a, b]))
        self.assertIn("4171-4253 GB/s", wbplots.ceilings_text([a, b]))

    def test_different_gpus_warn(self):
        warning = wbplots.comparison_warning([self.file(), self.file(gpu="NVIDIA H100 80GB HBM3")])
        self.assertIn("different GPUs", warning)

    def test_different_revisions_warn(self):
        warning = wbplots.comparison_warning([self.file(git_revision="aaaa"), self.file(git_revision="bbbb")])
        self.assertIn("different code revisions", warning)

    def test_the_shipped_reference_results_warn_only_across_revisions(self):
        # The shipped results: one GPU (an H200). They normally come from one reference run of
        # one revision, and then no figure warns; while data/results/README.md lists files of
        # other runs (development runs of rewritten references), the warning must say so.
        shipped = wbplots.load_results([REPO / "data" / "results"])
        files = list(shipped.files.values())
        self.assertGreater(len(files), 1)
        self.assertEqual(len({f.env.get("gpu") for f in files}), 1,
                         [wbplots.env_summary(f.env) for f in files])
        revisions = {f.env.get("git_revision") for f in files}
        warning = wbplots.comparison_warning(files)
        if len(revisions) == 1:
            self.assertIsNone(warning, [wbplots.env_summary(f.env) for f in files])
        else:
            self.assertIsNotNone(warning, f"revisions {sorted(revisions)} but no warning")

    def test_stamp_has_no_warning_for_one_run_identity(self):
        require_modules(("matplotlib",))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([1, 2], [1, 2])
        wbplots.stamp(fig, [self.file(copy_gbps=4100.0), self.file(copy_gbps=4200.0)], measured="m", baseline="b")
        text = "\n".join(t.get_text() for t in fig.texts)
        plt.close(fig)
        self.assertNotIn("WARNING", text)
        self.assertEqual(1, text.count("GPU: "), text)


class Manifests(unittest.TestCase):
    """The chapters a notebook plots come from tests/*/chapter.json ("plots")."""

    def test_the_repository_manifests(self):
        self.assertEqual(("01", "02", "03", "08"), wbplots.ladder_chapters())
        ops = wbplots.fusion_plots()
        self.assertEqual([("softmax", "04", "softmax"), ("gelu", "05", "gelu"), ("add_norm", "06", None)],
                         [(p.op, p.chapter, p.peer) for p in ops])
        self.assertTrue(all(p.flops_per_element for p in ops))

    def test_a_new_chapter_needs_only_its_manifest(self):
        with tempfile.TemporaryDirectory() as d:
            for slug, plots in (("04_fused_softmax", {"fusion": {"op": "softmax"}}),
                                ("06_layernorm", {"fusion": {"op": "layernorm", "measures": "add + LayerNorm"}}),
                                ("03_persistent_weights", {"ladder": True}), ("00_measure_right", None)):
                (Path(d) / slug).mkdir()
                doc = {"id": slug[:2], "slug": slug}
                if plots:
                    doc["plots"] = plots
                (Path(d) / slug / "chapter.json").write_text(json.dumps(doc))
            self.assertEqual(("03",), wbplots.ladder_chapters(d))
            ops = wbplots.fusion_plots(d)
            self.assertEqual([("softmax", "04"), ("layernorm", "06")], [(p.op, p.chapter) for p in ops])
            self.assertEqual("add + LayerNorm", ops[1].measures)
            self.assertIsNone(ops[1].peer)

    def test_a_bad_plots_key_names_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "09_x").mkdir()
            (Path(d) / "09_x" / "chapter.json").write_text(json.dumps({"id": "09", "slug": "09_x", "plots": ["fusion"]}))
            with self.assertRaises(wbplots.ResultsError) as ctx:
                wbplots.fusion_plots(d)
            self.assertIn("09_x/chapter.json", str(ctx.exception))

    def test_the_peer_script_reads_the_same_manifests(self):
        sys.path.insert(0, str(REPO / "notebooks" / "peers"))
        try:
            import pytorch_peers
        finally:
            sys.path.pop(0)
        self.assertEqual([("softmax", "04_fused_softmax"), ("gelu", "05_fused_gelu")], pytorch_peers.peer_chapters())

    def test_the_demo_gradebook_is_recognised(self):
        self.assertTrue(wbplots.is_demo_gradebook(REPO / "data" / "results" / "gradebook-demo.csv"))
        self.assertFalse(wbplots.is_demo_gradebook(Path("grades/gradebook.csv")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
