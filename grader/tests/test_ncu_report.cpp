// `workbook profile`'s engine on ncu output recorded on an H200 (grader/tests/data/ncu_*.csv:
// `ncu --import ... --csv --page raw --print-units base --print-kernel-base demangled` of
// bench_04_solution and bench_05_solution --quick, two launches kept of each kernel and
// shape, columns of device attributes dropped), on malformed CSV, and on ncu's messages.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "grader/ncu_report.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;

namespace {

std::string recorded(const std::string& name) {
  return read_text_file(fs::path(WB_SOURCE_DIR) / "grader/tests/data" / name);
}

const KernelSummary* find_kernel(const std::vector<KernelSummary>& ks, const std::string& name,
                                 const std::string& grid) {
  for (const auto& k : ks)
    if (k.median.short_name == name && k.median.grid_dims == grid) return &k;
  return nullptr;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A kernel with every figure set, for the interpretation rules one at a time.
KernelLaunch typical() {
  KernelLaunch k;
  k.name = k.short_name = "my_kernel";
  k.grid_dims = "1024";
  k.block_dims = "256";
  k.grid_size = 1024;
  k.block_size = 256;
  k.duration_ns = 100e3;
  k.dram_pct = 30;
  k.dram_read_bytes = 64e6;
  k.dram_write_bytes = 64e6;
  k.sm_pct = 20;
  k.memory_pct = 30;
  k.l2_pct = 30;
  k.l1_pct = 20;
  k.achieved_occupancy_pct = 90;
  k.theoretical_occupancy_pct = 100;
  k.registers_per_thread = 32;
  k.limit_registers = 8;
  k.limit_shared_mem = 32;
  k.limit_warps = 8;
  k.limit_blocks = 32;
  k.waves_per_sm = 2;
  k.sm_count = 132;
  return k;
}

}  // namespace

TEST_CASE("ncu_metrics: the metric names profile asks ncu for, each one parsed") {
  const auto& m = ncu_metrics();
  for (const char* name : {"gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                           "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
                           "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
                           "launch__block_size", "launch__grid_size", "launch__occupancy_limit_registers"})
    CHECK(std::find(m.begin(), m.end(), name) != m.end());
  CHECK(ncu_metrics_argument().find(' ') == std::string::npos);
}

TEST_CASE("short_kernel_name: no return type, parameters or namespaces") {
  CHECK(short_kernel_name("void unnamed>::unary_kernel<unnamed>::Cube>(const float *, float *, unsigned long, T1, bool)") ==
        "unary_kernel<Cube>");
  CHECK(short_kernel_name("unnamed>::row_max_kernel(const float *, float *, int)") == "row_max_kernel");
  CHECK(short_kernel_name("void ch05::(anonymous namespace)::gelu_kernel<ch05::Op>(const float *, float *)") ==
        "gelu_kernel<Op>");
  CHECK(short_kernel_name("void unnamed>::softmax_split_row<128, 40, 4>(const float *, float *, int, int, int, "
                          "unnamed>::Slot *, unsigned int)") == "softmax_split_row<128, 40, 4>");
  CHECK(short_kernel_name("plain_kernel") == "plain_kernel");
}

TEST_CASE("parse_ncu_csv: chapter 05's recorded profile (GELU, unfused and fused)") {
  const auto launches = parse_ncu_csv(recorded("ncu_05_fused_gelu_solution.csv"));
  REQUIRE(launches.size() == 28);
  const KernelLaunch& first = launches.front();
  CHECK(first.short_name == "unary_kernel<Scale>");  // the first launch kept of the unfused GELU
  CHECK(first.device == "NVIDIA H200");
  CHECK(first.grid_dims == "16384");
  CHECK(first.block_dims == "256");
  CHECK(first.grid_size == 16384);  // "16,384": thousands separators
  CHECK(first.block_size == 256);
  CHECK(first.sm_count == 132);
  CHECK(first.duration_ns > 10e3);  // a 64 MB array: tens of microseconds
  CHECK(first.duration_ns < 1e6);
  CHECK(first.dram_read_bytes > 60e6);  // 2^24 floats read
  CHECK(first.registers_per_thread > 0);
  CHECK(first.shared_static_bytes == 0);
  CHECK(first.shared_dynamic_bytes == 0);
  for (const auto& k : launches) {
    CHECK(k.dram_pct >= 0);
    CHECK(k.dram_pct <= 100);
    CHECK(k.achieved_occupancy_pct <= k.theoretical_occupancy_pct + 1);
  }

  const auto kernels = summarize_launches(launches);
  CHECK(kernels.size() == 14);  // 7 kernels (6 unfused + 1 fused) at 2 sizes
  const auto* fused_small = find_kernel(kernels, "gelu_vec4_kernel", "16384");
  const auto* fused_large = find_kernel(kernels, "gelu_vec4_kernel", "65536");
  REQUIRE(fused_small);
  REQUIRE(fused_large);
  CHECK(fused_small->launches == 2);
  CHECK(fused_large->median.duration_ns > 3 * fused_small->median.duration_ns);  // 4x the bytes
  // The fused GELU streams 2^26 floats in and out: DRAM-bound.
  CHECK(starts_with(interpret(fused_large->median), "memory-bound at"));
  for (const auto& k : kernels) CHECK_FALSE(interpret(k.median).empty());
}

TEST_CASE("parse_ncu_csv: chapter 04's recorded profile (softmax) and its interpretations") {
  const auto kernels = summarize_launches(parse_ncu_csv(recorded("ncu_04_fused_softmax_solution.csv")));
  CHECK(kernels.size() == 12);  // 3 unfused + 1 fused kernel at 3 shapes
  // 16 rows: one block per row, 16 blocks on a 132-SM GPU.
  const auto* row_max_16 = find_kernel(kernels, "row_max_kernel", "16");
  REQUIRE(row_max_16);
  CHECK(row_max_16->median.grid_size == 16);
  CHECK(row_max_16->median.shared_static_bytes == 32);
  CHECK(starts_with(interpret(row_max_16->median), "too few blocks: 16 blocks for 132 SMs"));
  // The normalize kernel's 2-D grid.
  CHECK(find_kernel(kernels, "normalize_kernel", "16x149"));
  // One row of 151936 floats read by one block: too few blocks or launch-bound, never memory-bound.
  const auto* row_max_1 = find_kernel(kernels, "row_max_kernel", "1");
  REQUIRE(row_max_1);
  const std::string one_row = interpret(row_max_1->median);
  CHECK((starts_with(one_row, "too few blocks: 1 block for") || starts_with(one_row, "launch-bound")));
  // 4096 x 4096, one block of 128 threads per row: the DRAM-heavy case.
  const auto* per_row = find_kernel(kernels, "softmax_block_per_row<128, 4>", "4096");
  REQUIRE(per_row);
  CHECK(per_row->median.block_size == 128);
  CHECK(per_row->median.dram_pct > 50);

  const std::string table = format_profile_table(kernels);
  CHECK(contains(table, "row_max_kernel"));
  CHECK(contains(table, "softmax_split_row<128, 40, 4>"));
  CHECK(contains(table, "-> too few blocks"));
  CHECK(contains(table, "16x149 x 256"));
  CHECK(contains(table, "smem static+dyn"));
  CHECK(contains(table, "32 B + 0 B"));
}

TEST_CASE("parse_ncu_csv: leading ncu messages and program output are skipped; units are scaled") {
  const std::string text =
      "==PROF== Connected to process 1\nbench_05: fused 2^24\n"
      "\"ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"" + join(ncu_metrics(), "\",\"") + "\"\n" +
      "\"\",\"\",\"\",\"\"" + [] {
        std::string u;
        for (const auto& m : ncu_metrics())
          u += m == "gpu__time_duration.sum"                 ? ",\"usecond\""
               : m.find("dram__bytes") == 0                  ? ",\"Mbyte\""
               : m.find("launch__shared_mem_per_block") == 0 ? ",\"Kbyte/block\""
                                                            : ",\"\"";
        return u;
      }() + "\n" +
      "\"0\",\"k(int)\",\"(32, 1, 1)\",\"(2, 3, 1)\"" + [] {
        std::string v;
        for (const auto& m : ncu_metrics()) v += m == "gpu__time_duration.sum" ? ",\"1.5\"" : m.find("pct") != std::string::npos ? ",\"n/a\"" : ",\"2\"";
        return v;
      }() + "\n";
  const auto launches = parse_ncu_csv(text);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].duration_ns == doctest::Approx(1500));
  CHECK(launches[0].dram_read_bytes == doctest::Approx(2e6));
  CHECK(launches[0].shared_static_bytes == doctest::Approx(2e3));
  CHECK(std::isnan(launches[0].dram_pct));  // "n/a"
  CHECK(launches[0].grid_dims == "2x3");
}

TEST_CASE("parse_ncu_csv: malformed input is refused with the line and column") {
  const std::string good = recorded("ncu_05_fused_gelu_solution.csv");

  SUBCASE("not CSV at all") {
    CHECK_THROWS_WITH_AS(parse_ncu_csv("==PROF== Connected\nhello\n"),
                         doctest::Contains("no ncu CSV table found"), NcuCsvError);
  }
  SUBCASE("a row cut short") {
    const std::string cut = good.substr(0, good.find('\n', good.find('\n', good.find('\n') + 1) + 1) + 200);
    CHECK_THROWS_WITH_AS(parse_ncu_csv(cut), doctest::Contains("ncu CSV line 4"), NcuCsvError);  // the second launch
  }
  SUBCASE("a row with a field too few") {
    std::string short_row = good;
    const auto row3 = short_row.find('\n', short_row.find('\n') + 1) + 1;
    const auto end3 = short_row.find('\n', row3);
    short_row.erase(short_row.rfind(",\"", end3), end3 - short_row.rfind(",\"", end3));
    CHECK_THROWS_WITH_AS(parse_ncu_csv(short_row), doctest::Contains("ncu CSV line 3: 104 fields where the header has 105"),
                         NcuCsvError);
  }
  SUBCASE("a metric column missing") {
    std::string renamed = good;
    replace_all(renamed, "\"launch__registers_per_thread\"", "\"launch__registers_per_thread_x\"");
    CHECK_THROWS_WITH_AS(parse_ncu_csv(renamed), doctest::Contains("has no column launch__registers_per_thread"),
                         NcuCsvError);
  }
  SUBCASE("a value that is not a number") {
    std::string bad = good;
    const auto row3 = bad.find('\n', bad.find('\n') + 1) + 1;
    const auto sm = bad.find("\"132\"", row3);  // the SM count of the first launch, garbled
    REQUIRE(sm != std::string::npos);
    bad.replace(sm, 5, "\"13x\"");
    CHECK_THROWS_WITH_AS(parse_ncu_csv(bad), doctest::Contains("'13x' is not a number"), NcuCsvError);
  }
  SUBCASE("an unclosed quote") {
    CHECK_THROWS_WITH_AS(parse_ncu_csv(good + "\"5\",\"oops"), doctest::Contains("not closed"), NcuCsvError);
  }
}

TEST_CASE("interpret: one line naming what bounds the kernel, with its figure") {
  KernelLaunch k = typical();

  SUBCASE("memory-bound near the ceiling") {
    k.dram_pct = 87.4;
    CHECK(interpret(k) == "memory-bound at 87% of DRAM peak: near the ceiling; only moving fewer bytes (fusing "
                          "kernels, smaller types) makes it faster");
  }
  SUBCASE("memory-bound with room left") {
    k.dram_pct = 56;
    CHECK(starts_with(interpret(k), "memory-bound at 56% of DRAM peak, with room left"));
  }
  SUBCASE("launch-bound") {
    k.duration_ns = 3100;
    k.dram_read_bytes = 4096;
    k.dram_write_bytes = 0;
    CHECK(starts_with(interpret(k), "launch-bound: 3.1 us for 4.10 KB of DRAM traffic"));
  }
  SUBCASE("too few blocks") {
    k.grid_size = 16;
    k.dram_pct = 3;
    CHECK(starts_with(interpret(k), "too few blocks: 16 blocks for 132 SMs, so most SMs sit idle (DRAM at 3%)"));
  }
  SUBCASE("compute-bound") {
    k.sm_pct = 72;
    k.dram_pct = 12;
    CHECK(starts_with(interpret(k), "compute-bound: SM throughput at 72% of peak, DRAM at 12%"));
  }
  SUBCASE("cache-bound") {
    k.l2_pct = 85;
    CHECK(starts_with(interpret(k), "bound by on-chip memory: L2 at 85% of peak while DRAM is at 30%"));
  }
  SUBCASE("latency-bound with register-limited occupancy") {
    k.dram_pct = 12;
    k.registers_per_thread = 128;
    k.limit_registers = 2;
    k.achieved_occupancy_pct = 24.6;
    k.theoretical_occupancy_pct = 25;
    CHECK(interpret(k) ==
          "latency-bound: DRAM at 12% and the SMs at 20% of peak: too few memory requests in flight to hide "
          "their latency (more independent loads per thread, more warps); low occupancy (25%, at most 25% because "
          "128 registers per thread allow only 2 blocks of 256 threads per SM)");
  }
  SUBCASE("occupancy limited by shared memory, then by small blocks") {
    k.theoretical_occupancy_pct = 50;
    k.limit_shared_mem = 2;
    k.shared_static_bytes = 48e3;
    k.shared_dynamic_bytes = 50e3;
    CHECK(occupancy_limiter(k) == "98.0 KB of shared memory per block allow only 2 blocks per SM");
    k.limit_shared_mem = 32;  // what ncu reports without shared memory
    k.shared_static_bytes = k.shared_dynamic_bytes = 0;
    k.block_size = 32;
    k.limit_registers = 64;
    k.limit_warps = 64;
    k.limit_blocks = 32;
    CHECK(occupancy_limiter(k) == "blocks of only 32 threads: the SM's limit of 32 blocks leaves warp slots empty");
  }
  SUBCASE("full theoretical occupancy names no limiter") { CHECK(occupancy_limiter(k).empty()); }
}

TEST_CASE("format_duration_ns and format_bytes") {
  CHECK(format_duration_ns(850) == "850 ns");
  CHECK(format_duration_ns(30656) == "30.7 us");
  CHECK(format_duration_ns(306000) == "306 us");
  CHECK(format_duration_ns(2.5e6) == "2.50 ms");
  CHECK(format_bytes(32) == "32 B");
  CHECK(format_bytes(4096) == "4.10 KB");
  CHECK(format_bytes(67116032) == "67.1 MB");
  CHECK(format_bytes(513822208) == "514 MB");
}

TEST_CASE("ncu's messages: counters not permitted, sandboxed, nothing profiled, starters") {
  const std::string perm =
      "==PROF== Connected to process 4242 (/home/s/build/bin/bench_05_student)\n"
      "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
      "the target device 0. For instructions on enabling permissions and to get more information see "
      "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n";
  const std::string why = explain_ncu_failure(perm);
  CHECK(contains(why, "ERR_NVGPUCTRPERM"));
  CHECK(contains(why, "run the profile as root"));
  CHECK(contains(why, "NVreg_RestrictProfilingToAdminUsers=0"));
  CHECK(contains(explain_ncu_failure("==ERROR== Failed to initialize the profiler: LibraryNotLoaded"), "gVisor"));
  CHECK(explain_ncu_failure("==PROF== Disconnected from process 1").empty());

  // Recorded: bench_05_student --quick (the starter) under ncu on the H200.
  const std::string starter =
      "==PROF== Connected to process 4187 (/work/main/.wt-profile/build/bin/bench_05_student)\n"
      "bench_05: unfused 2^24\n"
      "bench_05: unfused: not implemented yet: ch05 gelu_unfused (steps 1-2): one kernel per elementary op (skipped)\n"
      "bench_05: fused 2^24\n"
      "bench_05: fused: not implemented yet: ch05 gelu_fused (steps 3-4): the whole formula in one kernel (skipped)\n"
      "bench_05: unfused: not implemented yet: ch05 gelu_unfused (steps 1-2): one kernel per elementary op (skipped)\n"
      "==PROF== Disconnected from process 4187\n"
      "==WARNING== No kernels were profiled.\n"
      "Available Kernels:\n"
      "1. _ZN2wb41_GLOBAL__N__f1750108_9_timing_cu_938a333711copy_kernelEPK6float4PS1_m\n";
  CHECK(ncu_profiled_nothing(starter));
  CHECK_FALSE(ncu_profiled_nothing(perm));
  const auto todo = not_implemented_lines(starter);
  REQUIRE(todo.size() == 2);  // repeated lines once
  CHECK(contains(todo[0], "gelu_unfused (steps 1-2)"));
  CHECK(contains(todo[1], "gelu_fused (steps 3-4)"));
}

TEST_CASE("find_ncu: an explicit path, PATH, then the usual install directories") {
  const fs::path dir = fs::temp_directory_path() / ("wb-ncu-test-" + random_hex(4));
  fs::create_directories(dir / "bin");
  {
    std::ofstream(dir / "bin" / "ncu") << "#!/bin/sh\n";
  }
  fs::permissions(dir / "bin" / "ncu", fs::perms::owner_all);
  if (find_program("ncu").empty()) CHECK(find_ncu("", {dir / "bin"}) == dir / "bin" / "ncu");
  CHECK(find_ncu((dir / "bin" / "ncu").string(), {}) == dir / "bin" / "ncu");
  CHECK(find_ncu((dir / "nowhere" / "ncu").string(), {}).empty());
  const std::string msg = ncu_missing_message({dir / "bin"});
  CHECK(contains(msg, "`ncu` is not installed"));
  CHECK(contains(msg, "cuda-nsight-compute"));
  CHECK(contains(msg, "--ncu"));
  fs::remove_all(dir);
}
