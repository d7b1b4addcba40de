#pragma once
// `workbook profile`'s engine: what to ask Nsight Compute (ncu) for, how to read its CSV
// (`ncu --import REPORT --csv --page raw --print-units base`), one summary per kernel and
// launch configuration, and the one line that says why that kernel takes the time it takes.
// Pure functions of text, so the host tests run them on ncu output recorded on a GPU
// (grader/tests/data/ncu_*.csv). docs/profile.md explains the figures to students.
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wb::grader {

// Input that is not the CSV ncu writes (truncated, a column missing, a field not a number):
// the message names the line and the column.
class NcuCsvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The metrics `profile` asks for (ncu --metrics), all present in Nsight Compute 2025 on
// Hopper; the CSV must hold each of them.
const std::vector<std::string>& ncu_metrics();
// ncu_metrics() joined with commas, as --metrics takes them.
std::string ncu_metrics_argument();

// One profiled kernel launch: a row of the CSV. Times in ns, sizes in bytes, percentages
// in 0..100. A value the CSV left empty ("n/a") is NaN.
struct KernelLaunch {
  int id = 0;
  std::string name;        // as ncu printed it: "void unnamed>::unary_kernel<unnamed>::Cube>(const float *, ...)"
  std::string short_name;  // "unary_kernel<Cube>"
  std::string device;      // "NVIDIA H200", when the CSV says
  std::string grid_dims, block_dims;  // "16384", "16x149": the launch's shape
  double grid_size = 0, block_size = 0;  // blocks in the grid, threads per block
  double duration_ns = 0;
  double dram_pct = 0;          // DRAM throughput, % of peak (elapsed)
  double dram_read_bytes = 0, dram_write_bytes = 0;
  double sm_pct = 0;            // SM (compute) throughput, % of peak
  double memory_pct = 0;        // the busiest memory unit (DRAM, L2, L1), % of peak
  double l2_pct = 0, l1_pct = 0;
  double achieved_occupancy_pct = 0, theoretical_occupancy_pct = 0;
  double registers_per_thread = 0;
  double shared_static_bytes = 0, shared_dynamic_bytes = 0;
  double waves_per_sm = 0, sm_count = 0;
  // Blocks per SM each resource allows (launch__occupancy_limit_*); the smallest wins.
  double limit_registers = 0, limit_shared_mem = 0, limit_warps = 0, limit_blocks = 0;

  double dram_bytes() const { return dram_read_bytes + dram_write_bytes; }
};

// Parses ncu's raw-page CSV. Lines before the header ("ID","Process ID",...) are skipped
// (ncu's ==PROF== lines, the program's own output); the row of units after the header is
// read and values are scaled to ns and bytes. Throws NcuCsvError on malformed input.
std::vector<KernelLaunch> parse_ncu_csv(std::string_view text);

// "void ch05::<unnamed>::unary_kernel<ch05::<unnamed>::Cube>(const float *, float *)" ->
// "unary_kernel<Cube>": no return type, parameters, namespaces.
std::string short_kernel_name(std::string_view demangled);

// The launches of one kernel with one launch shape and about the same bytes moved (a bench
// runs each variant at several sizes, many times): the medians of their figures.
struct KernelSummary {
  KernelLaunch median;  // each figure the median over the launches
  int launches = 0;
};
// Groups in order of first appearance.
std::vector<KernelSummary> summarize_launches(const std::vector<KernelLaunch>& launches);

// One line: what bounds this kernel, with the figure that shows it.
//   "memory-bound at 85% of DRAM peak: near the ceiling; ..."
//   "launch-bound: 3.1 us for 4 KB: ..."
//   "too few blocks: 16 blocks for 132 SMs: ..."
//   "compute-bound: SM throughput at 72% of peak, DRAM at 12%: ..."
//   "latency-bound: DRAM at 12% and the SMs at 20% of peak: ...; low occupancy (25%) because ..."
std::string interpret(const KernelLaunch& k);
// Why occupancy is limited ("128 registers per thread allow 2 blocks of 256 threads per SM"),
// or "" when nothing holds it under the hardware's maximum.
std::string occupancy_limiter(const KernelLaunch& k);

// The table `workbook profile` prints: one row per summary, its interpretation under it.
std::string format_profile_table(const std::vector<KernelSummary>& kernels);

// "12.3 us", "1.20 ms"; "4 KB", "67.1 MB" (powers of 1000, as ncu and the lessons count).
std::string format_duration_ns(double ns);
std::string format_bytes(double bytes);

// What went wrong, from ncu's output, in words a student can act on; "" when nothing known.
// Recognizes ERR_NVGPUCTRPERM (counters not permitted), a profiler that cannot load (a
// sandboxed container), and an unknown option.
std::string explain_ncu_failure(std::string_view output);
// True when ncu ran the program but no launch matched the filter.
bool ncu_profiled_nothing(std::string_view output);
// The program's "not implemented yet: ..." lines (a starter's unwritten steps).
std::vector<std::string> not_implemented_lines(std::string_view output);

// Finds ncu: `explicit_path` when given (must exist), else PATH, else `search_dirs` (for
// the defaults: $CUDA_HOME/bin, /usr/local/cuda/bin, the newest /opt/nvidia/nsight-compute/*).
// Empty when not found.
std::filesystem::path find_ncu(const std::string& explicit_path, const std::vector<std::filesystem::path>& search_dirs);
std::vector<std::filesystem::path> default_ncu_dirs();
// What to do when ncu is not installed.
std::string ncu_missing_message(const std::vector<std::filesystem::path>& searched);

}  // namespace wb::grader
