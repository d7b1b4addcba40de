// workbook report: the comparison notebooks, executed headless, as HTML with their figures.
//
//   1. finds the results: the directories given with --results-dir, or else results/ (what
//      `./workbook bench` wrote here) in front of data/results/ (the reference results
//      measured on an H200 and shipped with the workbook). A file in an earlier directory
//      shadows the same name in a later one, chapter by chapter, so the report works on any
//      machine and shows local numbers wherever they exist;
//   2. validates every results file first (notebooks/wbplots.py validate: JSON Schema in
//      docs/results.schema.json plus the rules a schema cannot say) and stops with a message
//      naming each malformed file;
//   3. runs `python3 -m nbconvert --execute --to html` on each notebook in notebooks/, with
//      WB_RESULTS_PATH, WB_REPORT_DIR, WB_NOTEBOOK and WB_GRADEBOOK telling the notebook what
//      to read and where its PNG figures go;
//   4. writes <out>/<notebook>.html, <out>/figures/<notebook>/*.png and <out>/index.html.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "grader/process.hpp"
#include "grader/util.hpp"

namespace wb::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// Running a child (Python, nbconvert) with its output captured. The grader's process runner
// puts it in its own process group and kills the whole group on a timeout or an interrupt,
// so an executing notebook's Jupyter kernel never outlives the report.
// ---------------------------------------------------------------------------------------

struct Captured {
  grader::ProcessResult result;
  double timeout_s = 0;
  bool ok() const { return result.ok(); }
  bool started() const { return result.started; }
  const std::string& output() const { return result.output; }
  std::string describe() const { return result.describe(timeout_s); }
};

Captured run_captured(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& set,
                      const std::vector<std::string>& unset, double timeout_s) {
  grader::ProcessSpec spec;
  spec.argv = argv;
  spec.env = grader::inherited_environment(set, unset);
  spec.limits.timeout_s = timeout_s;
  spec.limits.output_bytes = 4 << 20;
  return {grader::run_process(spec), timeout_s};
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

bool has_json(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") return true;
  return false;
}

// The lines of a failed notebook run worth showing: the notebook's own error message
// (ResultsError names the file) when there is one, else the end of the traceback.
std::string failure_excerpt(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("Kernel is running over TCP") != std::string::npos) continue;
    lines.push_back(line);
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto at = lines[i].find("ResultsError: ");
    if (at != std::string::npos) {
      std::string msg = lines[i].substr(at + std::strlen("ResultsError: "));
      for (std::size_t j = i + 1; j < lines.size() && lines[j].rfind("  ", 0) == 0; ++j) msg += "\n" + lines[j];
      return msg;
    }
  }
  const std::size_t from = lines.size() > 25 ? lines.size() - 25 : 0;
  std::string out;
  for (std::size_t i = from; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

std::vector<fs::path> pngs_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".png") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------
// The subcommand
// ---------------------------------------------------------------------------------------

struct Options {
  std::vector<std::string> results_dirs;
  std::string out = std::string(WB_SOURCE_DIR) + "/report";
  std::vector<std::string> notebooks;
  std::string gradebook;
  std::string python = "python3";
  bool no_code = false;
  double timeout_s = 900;
};

struct NotebookRun {
  std::string stem;
  bool ok = false;
  double seconds = 0;
  std::vector<fs::path> figures;
  std::string error;
};

// "02_fusion", "02" and "fusion" all name notebooks/02_fusion.ipynb.
bool names_notebook(const std::string& arg, const std::string& stem) {
  if (arg == stem || arg + ".ipynb" == stem) return true;
  const auto us = stem.find('_');
  return us != std::string::npos && (arg == stem.substr(0, us) || arg == stem.substr(us + 1));
}

void write_index(const fs::path& out, const std::vector<NotebookRun>& runs,
                 const std::vector<fs::path>& results_path, const std::string& gradebook) {
  std::ostringstream h;
  h << "<!doctype html><html><head><meta charset=\"utf-8\"><title>CUDA workbook report</title>"
       "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
       "img{max-width:340px;border:1px solid #ddd;margin:4px}.fail{color:#b00}code{background:#f4f4f4}"
       "</style></head><body><h1>CUDA workbook report</h1>\n";
  h << "<p>Rendered " << grader::markup_escape(grader::utc_now_iso()) << " by <code>./workbook report</code>. Results read from "
    << "(earlier directories win, file by file): ";
  for (std::size_t i = 0; i < results_path.size(); ++i)
    h << (i ? " &gt; " : "") << "<code>" << grader::markup_escape(results_path[i].string()) << "</code>";
  if (!gradebook.empty()) h << "; gradebook <code>" << grader::markup_escape(gradebook) << "</code>";
  h << ". Each notebook lists the exact files it read.</p>\n";
  for (const auto& r : runs) {
    h << "<h2><a href=\"" << grader::markup_escape(r.stem) << ".html\">" << grader::markup_escape(r.stem) << "</a></h2>\n";
    if (!r.ok) {
      h << "<p class=\"fail\">did not render: <pre>" << grader::markup_escape(r.error) << "</pre></p>\n";
      continue;
    }
    for (const auto& f : r.figures) {
      const std::string rel = "figures/" + r.stem + "/" + f.filename().string();
      h << "<a href=\"" << grader::markup_escape(rel) << "\"><img src=\"" << grader::markup_escape(rel) << "\" alt=\""
        << grader::markup_escape(f.stem().string()) << "\"></a>";
    }
    h << "\n";
  }
  h << "</body></html>\n";
  std::ofstream(out / "index.html") << h.str();
}

// A phase that cannot go on has printed why; run_report returns `code`.
struct Stop {
  int code;
};

// Results: explicit directories, or local results/ in front of the shipped data/results/.
std::vector<fs::path> results_search_path(const Options& opt, const fs::path& source_dir) {
  std::vector<fs::path> results_path;
  if (!opt.results_dirs.empty()) {
    for (const auto& d : opt.results_dirs) {
      const fs::path p = fs::absolute(d);
      if (!fs::is_directory(p)) {
        std::cerr << "workbook report: results directory " << p.string() << " does not exist\n";
        throw Stop{2};
      }
      results_path.push_back(p);
    }
  } else {
    if (has_json(source_dir / "results")) results_path.push_back(source_dir / "results");
    results_path.push_back(source_dir / "data" / "results");
  }
  if (std::none_of(results_path.begin(), results_path.end(), has_json)) {
    std::cerr << "workbook report: no results files found in ";
    for (std::size_t i = 0; i < results_path.size(); ++i)
      std::cerr << (i ? " or " : "") << grader::display_path(results_path[i]);
    std::cerr << ".\nRun `./workbook bench` on a machine with a GPU, or restore the shipped reference "
                 "results (data/results/*.json) from the repository.\n";
    throw Stop{2};
  }
  return results_path;
}

std::string gradebook_path(const Options& opt) {
  if (opt.gradebook.empty()) return "";
  const fs::path g = fs::absolute(opt.gradebook);
  if (!fs::is_regular_file(g)) {
    std::cerr << "workbook report: gradebook " << g.string() << " not found (write one with "
              << "`./workbook grade-all ROSTER_DIR --out DIR`: DIR/gradebook.csv)\n";
    throw Stop{2};
  }
  return g.string();
}

// Notebooks: every notebooks/*.ipynb, or the ones asked for.
std::vector<fs::path> choose_notebooks(const Options& opt, const fs::path& notebooks_dir) {
  std::vector<fs::path> all;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(notebooks_dir, ec))
    if (e.path().extension() == ".ipynb") all.push_back(e.path());
  std::sort(all.begin(), all.end());
  if (all.empty()) {
    std::cerr << "workbook report: no notebooks in " << notebooks_dir.string() << "\n";
    throw Stop{2};
  }
  std::vector<fs::path> chosen;
  for (const auto& arg : opt.notebooks) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const fs::path& p) { return names_notebook(arg, p.stem().string()); });
    if (it == all.end()) {
      std::cerr << "workbook report: no notebook matches '" << arg << "'; notebooks:";
      for (const auto& p : all) std::cerr << " " << p.stem().string();
      std::cerr << "\n";
      throw Stop{2};
    }
    if (std::find(chosen.begin(), chosen.end(), *it) == chosen.end()) chosen.push_back(*it);
  }
  return chosen.empty() ? all : chosen;
}

// The tools: Jupyter's nbconvert and friends, in the Python that will run the notebooks.
void require_jupyter(const Options& opt, const fs::path& notebooks_dir) {
  const auto probe = run_captured(
      {opt.python, "-c", "import nbconvert, nbclient, ipykernel, matplotlib, jsonschema"}, {}, {}, 120);
  if (probe.ok()) return;
  std::cerr << "workbook report: the notebooks need Jupyter (nbconvert, nbclient, ipykernel), matplotlib "
               "and jsonschema in "
            << opt.python << ", and "
            << (probe.started() ? "they are not all installed (" + last_line(probe.output()) + ").\n"
                                : opt.python + " could not be run.\n")
            << "Install them with:\n  " << opt.python << " -m pip install -r "
            << (notebooks_dir / "requirements.txt").string() << "\n";
  throw Stop{2};
}

// Every results file is checked before any notebook runs, so a malformed file is named
// once, plainly, instead of surfacing as a traceback inside a notebook.
void validate_results(const Options& opt, const fs::path& notebooks_dir, const std::vector<fs::path>& results_path) {
  std::vector<std::string> validate = {opt.python, (notebooks_dir / "wbplots.py").string(), "validate"};
  for (const auto& d : results_path)
    if (fs::is_directory(d)) validate.push_back(d.string());
  std::cerr << "workbook report: checking the results files\n";
  const auto checked = run_captured(validate, {}, {}, 300);
  int valid_files = 0;
  std::istringstream lines(checked.output());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("ok ", 0) == 0)
      ++valid_files;  // the notebooks list the files they read; only problems are news here
    else
      std::cerr << line << "\n";
  }
  if (checked.ok()) {
    std::cerr << "workbook report: " << valid_files << " results file(s), all valid\n";
    return;
  }
  std::cerr << "workbook report: stopped: fix the results files named above (rerun `./workbook bench "
               "CHAPTER`), or remove them to fall back to the shipped reference results.\n";
  throw Stop{1};
}

// What every notebook's kernel gets: where the results are, where figures go.
struct NotebookEnvironment {
  std::string search;      // WB_RESULTS_PATH
  std::string pythonpath;  // notebooks/ first
  std::string gradebook;
};

// Executes one notebook into `out`/<stem>.html (+ figures/<stem>/*.png).
NotebookRun render_notebook(const fs::path& notebook, const Options& opt, const fs::path& out,
                            const NotebookEnvironment& env) {
  NotebookRun run;
  run.stem = notebook.stem().string();
  std::error_code ec;
  fs::remove_all(out / "figures" / run.stem, ec);  // figures from an earlier report must not pass for this one's
  std::vector<std::pair<std::string, std::string>> set = {
      {"WB_RESULTS_PATH", env.search},
      {"WB_REPORT_DIR", out.string()},
      {"WB_NOTEBOOK", run.stem},
      {"PYTHONPATH", env.pythonpath},
      {"JUPYTER_PLATFORM_DIRS", "1"},
      {"PYDEVD_DISABLE_FILE_VALIDATION", "1"},
  };
  if (!env.gradebook.empty()) set.emplace_back("WB_GRADEBOOK", env.gradebook);
  // MPLBACKEND=Agg (common on headless machines) would keep the figures out of the HTML:
  // the kernel's own inline backend must draw them.
  const std::vector<std::string> unset = {"MPLBACKEND"};
  std::vector<std::string> argv = {opt.python, "-m", "nbconvert", "--execute", "--to", "html",
                                   "--output-dir", out.string(),
                                   "--ExecutePreprocessor.timeout=" + std::to_string(static_cast<int>(opt.timeout_s))};
  if (opt.no_code) argv.push_back("--no-input");
  argv.push_back(notebook.string());
  const auto started = Clock::now();
  const auto result = run_captured(argv, set, unset, opt.timeout_s);
  run.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  run.figures = pngs_in(out / "figures" / run.stem);
  run.ok = result.ok() && fs::exists(out / (run.stem + ".html"));
  if (run.ok) {
    std::cerr << "ok (" << std::fixed << std::setprecision(1) << run.seconds << " s, " << run.figures.size()
              << " figure" << (run.figures.size() == 1 ? "" : "s") << ") -> "
              << grader::display_path(out / (run.stem + ".html")) << "\n";
  } else {
    run.error = failure_excerpt(result.output());
    std::cerr << "failed (" << result.describe() << ")\n" << run.error << "\n";
  }
  return run;
}

int run_report(const Options& opt) {
  grader::install_interrupt_handlers();
  const fs::path source_dir = WB_SOURCE_DIR;
  const fs::path notebooks_dir = source_dir / "notebooks";
  try {
    const std::vector<fs::path> results_path = results_search_path(opt, source_dir);
    NotebookEnvironment env;
    env.gradebook = gradebook_path(opt);
    const std::vector<fs::path> chosen = choose_notebooks(opt, notebooks_dir);
    require_jupyter(opt, notebooks_dir);
    validate_results(opt, notebooks_dir, results_path);

    const fs::path out = fs::absolute(opt.out);
    std::error_code ec;
    fs::create_directories(out / "figures", ec);
    if (ec) {
      std::cerr << "workbook report: cannot create " << out.string() << ": " << ec.message() << "\n";
      return 2;
    }
    for (const auto& d : results_path) env.search += (env.search.empty() ? "" : ":") + d.string();
    const char* old_pythonpath = std::getenv("PYTHONPATH");
    env.pythonpath = notebooks_dir.string() + (old_pythonpath && *old_pythonpath ? std::string(":") + old_pythonpath : "");

    std::vector<NotebookRun> runs;
    int failed = 0;
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      std::cerr << "[" << i + 1 << "/" << chosen.size() << "] " << chosen[i].stem().string() << " ... " << std::flush;
      runs.push_back(render_notebook(chosen[i], opt, out, env));
      failed += runs.back().ok ? 0 : 1;
    }
    write_index(out, runs, results_path, env.gradebook);
    std::cerr << "workbook report: " << runs.size() - failed << " of " << runs.size()
              << " notebook(s) rendered; open " << grader::display_path(out / "index.html") << "\n";
    return failed ? 1 : 0;
  } catch (const Stop& stop) {
    return stop.code;
  }
}

}  // namespace

void register_report(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report",
      "Execute the comparison notebooks headless and write HTML and PNG figures, from local results "
      "(results/) where present and the shipped H200 reference results (data/results/) elsewhere");
  cmd->add_option("--results-dir", opt->results_dirs,
                  "Read results from this directory (repeatable; earlier ones win file by file). "
                  "Default: results/ then data/results/");
  cmd->add_option("--out", opt->out, "Where the HTML and figures go")->capture_default_str();
  cmd->add_option("--notebook", opt->notebooks, "Only these notebooks (02_fusion, 02 or fusion; repeatable)");
  cmd->add_option("--gradebook", opt->gradebook, "The gradebook CSV for the class notebook (from grade-all)");
  cmd->add_option("--python", opt->python, "The Python with Jupyter installed")->capture_default_str();
  cmd->add_flag("--no-code", opt->no_code, "Leave the code cells out of the HTML");
  cmd->add_option("--timeout", opt->timeout_s, "Seconds one notebook may take to execute")->capture_default_str();
  cmd->callback([opt] { set_exit_code(run_report(*opt)); });
}

}  // namespace wb::cli
