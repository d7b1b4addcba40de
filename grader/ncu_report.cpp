#include "grader/ncu_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "grader/util.hpp"

namespace wb::grader {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The metrics, and where each lands in a KernelLaunch.
struct MetricField {
  const char* metric;
  double KernelLaunch::*field;
  enum Scale { none, time, bytes } scale;
};

const std::vector<MetricField>& metric_fields() {
  static const std::vector<MetricField> fields = {
      {"gpu__time_duration.sum", &KernelLaunch::duration_ns, MetricField::time},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", &KernelLaunch::dram_pct, MetricField::none},
      {"dram__bytes_read.sum", &KernelLaunch::dram_read_bytes, MetricField::bytes},
      {"dram__bytes_write.sum", &KernelLaunch::dram_write_bytes, MetricField::bytes},
      {"sm__throughput.avg.pct_of_peak_sustained_elapsed", &KernelLaunch::sm_pct, MetricField::none},
      {"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", &KernelLaunch::memory_pct,
       MetricField::none},
      {"lts__throughput.avg.pct_of_peak_sustained_elapsed", &KernelLaunch::l2_pct, MetricField::none},
      {"l1tex__throughput.avg.pct_of_peak_sustained_active", &KernelLaunch::l1_pct, MetricField::none},
      {"sm__warps_active.avg.pct_of_peak_sustained_active", &KernelLaunch::achieved_occupancy_pct,
       MetricField::none},
      {"sm__maximum_warps_per_active_cycle_pct", &KernelLaunch::theoretical_occupancy_pct, MetricField::none},
      {"launch__occupancy_limit_registers", &KernelLaunch::limit_registers, MetricField::none},
      {"launch__occupancy_limit_shared_mem", &KernelLaunch::limit_shared_mem, MetricField::none},
      {"launch__occupancy_limit_warps", &KernelLaunch::limit_warps, MetricField::none},
      {"launch__occupancy_limit_blocks", &KernelLaunch::limit_blocks, MetricField::none},
      {"launch__registers_per_thread", &KernelLaunch::registers_per_thread, MetricField::none},
      {"launch__shared_mem_per_block_static", &KernelLaunch::shared_static_bytes, MetricField::bytes},
      {"launch__shared_mem_per_block_dynamic", &KernelLaunch::shared_dynamic_bytes, MetricField::bytes},
      {"launch__block_size", &KernelLaunch::block_size, MetricField::none},
      {"launch__grid_size", &KernelLaunch::grid_size, MetricField::none},
      {"launch__waves_per_multiprocessor", &KernelLaunch::waves_per_sm, MetricField::none},
      {"launch__sm_count", &KernelLaunch::sm_count, MetricField::none},
  };
  return fields;
}

// One CSV record and the line it starts on.
struct Record {
  std::vector<std::string> fields;
  std::size_t line = 0;
};

// RFC 4180 records (quoted fields, "" inside quotes, commas and newlines in quotes), from
// `pos` to the end. Lines beginning with "==" outside a record are ncu's own messages.
std::vector<Record> read_records(std::string_view text, std::size_t pos, std::size_t first_line) {
  std::vector<Record> records;
  std::size_t line = first_line;
  while (pos < text.size()) {
    if (text[pos] == '\n' || text[pos] == '\r') {  // blank line
      if (text[pos] == '\n') ++line;
      ++pos;
      continue;
    }
    if (text.compare(pos, 2, "==") == 0) {
      const auto nl = text.find('\n', pos);
      pos = nl == std::string_view::npos ? text.size() : nl;
      continue;
    }
    Record r;
    r.line = line;
    std::string field;
    bool quoted = false, was_quoted = false;
    for (;;) {
      if (pos >= text.size()) {
        if (quoted) throw NcuCsvError("ncu CSV line " + std::to_string(r.line) + ": a quoted field is not closed (the file is cut short?)");
        r.fields.push_back(field);
        break;
      }
      const char c = text[pos++];
      if (quoted) {
        if (c == '"') {
          if (pos < text.size() && text[pos] == '"') {
            field += '"';
            ++pos;
          } else {
            quoted = false;
          }
        } else {
          if (c == '\n') ++line;
          field += c;
        }
      } else if (c == '"' && field.empty() && !was_quoted) {
        quoted = was_quoted = true;
      } else if (c == ',') {
        r.fields.push_back(field);
        field.clear();
        was_quoted = false;
      } else if (c == '\n' || c == '\r') {
        if (c == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
        ++line;
        r.fields.push_back(field);
        break;
      } else {
        field += c;
      }
    }
    records.push_back(std::move(r));
  }
  return records;
}

// "(16, 149, 1)" -> "16x149"; "(256, 1, 1)" -> "256".
std::string dims_text(const std::string& tuple) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : tuple) {
    if (c == '(' || c == ')' || c == ' ') continue;
    if (c == ',') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  while (parts.size() > 1 && parts.back() == "1") parts.pop_back();
  return join(parts, "x");
}

double unit_scale(const std::string& unit, MetricField::Scale scale, const std::string& column) {
  if (scale == MetricField::none) return 1;
  const std::string u = unit.substr(0, unit.find('/'));  // "byte/block" -> "byte"
  if (scale == MetricField::time) {
    static const std::map<std::string, double> time = {{"ns", 1},     {"nsecond", 1},   {"us", 1e3},
                                                       {"usecond", 1e3}, {"ms", 1e6},   {"msecond", 1e6},
                                                       {"s", 1e9},    {"second", 1e9}};
    if (auto it = time.find(u); it != time.end()) return it->second;
  } else {
    static const std::map<std::string, double> bytes = {{"byte", 1},   {"B", 1},     {"Kbyte", 1e3}, {"KB", 1e3},
                                                        {"Mbyte", 1e6}, {"MB", 1e6},  {"Gbyte", 1e9}, {"GB", 1e9},
                                                        {"Tbyte", 1e12}, {"TB", 1e12}};
    if (auto it = bytes.find(u); it != bytes.end()) return it->second;
  }
  throw NcuCsvError("ncu CSV: column '" + column + "' is in '" + unit +
                    "', a unit workbook profile does not know (run ncu with --print-units base)");
}

double parse_number(const std::string& raw, const Record& r, const std::string& column) {
  std::string s;
  for (char c : raw)
    if (c != ',' && c != ' ') s += c;  // ncu prints thousands separators: "1,980,000"
  if (s.empty() || s == "n/a" || s == "N/A") return kNaN;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0')
    throw NcuCsvError("ncu CSV line " + std::to_string(r.line) + ", column '" + column + "': '" + raw +
                      "' is not a number");
  return v;
}

double median_of(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double v) { return std::isnan(v) ? "n/a" : fixed(v, 0) + "%"; }

std::string count_text(double v) { return std::isnan(v) ? "n/a" : fixed(v, 0); }

std::string plural(double n, const std::string& one, const std::string& many) {
  return count_text(n) + " " + (n == 1 ? one : many);
}

}  // namespace

const std::vector<std::string>& ncu_metrics() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : metric_fields()) v.emplace_back(f.metric);
    return v;
  }();
  return names;
}

std::string ncu_metrics_argument() { return join(ncu_metrics(), ","); }

std::string short_kernel_name(std::string_view demangled) {
  std::string s(trim(demangled));
  if (starts_with(s, "void ")) s.erase(0, 5);
  // Parameters: the last top-level "(...)" (templates may hold parentheses too).
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        // "(anonymous namespace)" is not a parameter list when a "::" follows it.
        s.erase(i);
        break;
      }
    }
  }
  // The anonymous namespace, however the demangler spells it; ncu's CSV has been seen to
  // print "<unnamed>::" as "unnamed>::" ("void unnamed>::unary_kernel<unnamed>::Cube>(...)").
  replace_all(s, "(anonymous namespace)::", "");
  replace_all(s, "`anonymous namespace'::", "");
  replace_all(s, "<<unnamed>::", "<");
  if (starts_with(s, "<unnamed>::")) s.erase(0, 11);
  replace_all(s, "unnamed>::", "");
  // Drop namespace qualifiers, at every template depth: "ch05::gelu<ch05::Op>" -> "gelu<Op>".
  std::string out;
  std::size_t word_start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "::") == 0) {
      out.erase(word_start);
      ++i;
      continue;
    }
    out += s[i];
    if (s[i] == '<' || s[i] == ',' || s[i] == ' ' || s[i] == '(' || s[i] == '*' || s[i] == '&')
      word_start = out.size();
  }
  return out.empty() ? std::string(demangled) : out;
}

std::vector<KernelLaunch> parse_ncu_csv(std::string_view text) {
  // The header: the first line that starts with the "ID" column.
  std::size_t pos = 0, line = 1;
  bool found = false;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    const std::string_view l = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (starts_with(l, "\"ID\",") || starts_with(l, "ID,")) {
      found = true;
      break;
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
    ++line;
  }
  if (!found)
    throw NcuCsvError(
        "no ncu CSV table found: expected a header line starting with \"ID\",\"Process ID\" (the output of "
        "ncu --import REPORT --csv --page raw)");
  const auto records = read_records(text, pos, line);
  const Record& header = records.front();
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.fields.size(); ++i) column.emplace(header.fields[i], i);

  std::vector<std::string> missing;
  if (!column.count("Kernel Name")) missing.push_back("Kernel Name");
  for (const auto& f : metric_fields())
    if (!column.count(f.metric)) missing.push_back(f.metric);
  if (!missing.empty())
    throw NcuCsvError("ncu CSV (header on line " + std::to_string(header.line) + ") has no column " +
                      join(missing, ", ") +
                      ": was ncu run with --page raw and --metrics " + "<workbook profile's metrics>, and does this ncu "
                      "(Nsight Compute 2023 or newer) know them? `ncu --query-metrics` lists what it knows");

  std::size_t first = 1;
  std::vector<std::string> units(header.fields.size());
  if (records.size() > 1 && !records[1].fields.empty() && records[1].fields[0].empty()) {
    units = records[1].fields;
    first = 2;
  }
  const auto field_of = [&](const Record& r, const std::string& name) -> std::string {
    auto it = column.find(name);
    return it == column.end() ? std::string() : r.fields[it->second];
  };

  std::vector<KernelLaunch> launches;
  for (std::size_t i = first; i < records.size(); ++i) {
    const Record& r = records[i];
    if (r.fields.size() != header.fields.size())
      throw NcuCsvError("ncu CSV line " + std::to_string(r.line) + ": " + std::to_string(r.fields.size()) +
                        " fields where the header has " + std::to_string(header.fields.size()) +
                        " (a cut or edited file?)");
    KernelLaunch k;
    const double id = parse_number(field_of(r, "ID"), r, "ID");
    k.id = std::isnan(id) ? static_cast<int>(launches.size()) : static_cast<int>(id);
    k.name = field_of(r, "Kernel Name");
    if (k.name.empty()) throw NcuCsvError("ncu CSV line " + std::to_string(r.line) + ": the kernel has no name");
    k.short_name = short_kernel_name(k.name);
    k.device = field_of(r, "device__attribute_display_name");
    for (const auto& f : metric_fields()) {
      const std::size_t c = column.at(f.metric);
      const double v = parse_number(r.fields[c], r, f.metric);
      k.*(f.field) = std::isnan(v) ? v : v * unit_scale(units[c], f.scale, f.metric);
    }
    k.grid_dims = dims_text(field_of(r, "Grid Size"));
    k.block_dims = dims_text(field_of(r, "Block Size"));
    if (k.grid_dims.empty()) k.grid_dims = count_text(k.grid_size);
    if (k.block_dims.empty()) k.block_dims = count_text(k.block_size);
    launches.push_back(std::move(k));
  }
  return launches;
}

std::vector<KernelSummary> summarize_launches(const std::vector<KernelLaunch>& launches) {
  // Same kernel, same launch shape, and within 25% (plus 64 KB of noise) of the same DRAM
  // bytes: one configuration. A bench's sizes that share a grid (a grid-stride loop over a
  // grid that fills the GPU) are told apart by the bytes they move.
  struct Group {
    std::vector<const KernelLaunch*> members;
  };
  std::vector<Group> groups;
  for (const auto& k : launches) {
    Group* home = nullptr;
    for (auto& g : groups) {
      const KernelLaunch& ref = *g.members.front();
      if (ref.name != k.name || ref.grid_dims != k.grid_dims || ref.block_dims != k.block_dims) continue;
      const double a = ref.dram_bytes(), b = k.dram_bytes();
      if (std::isnan(a) || std::isnan(b) || std::fabs(a - b) <= 0.25 * std::max(a, b) + 65536) {
        home = &g;
        break;
      }
    }
    if (!home) {
      groups.emplace_back();
      home = &groups.back();
    }
    home->members.push_back(&k);
  }
  std::vector<KernelSummary> out;
  for (const auto& g : groups) {
    KernelSummary s;
    s.median = *g.members.front();
    s.launches = static_cast<int>(g.members.size());
    for (const auto& f : metric_fields()) {
      std::vector<double> values;
      for (const auto* m : g.members) values.push_back(m->*(f.field));
      s.median.*(f.field) = median_of(values);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string occupancy_limiter(const KernelLaunch& k) {
  if (std::isnan(k.theoretical_occupancy_pct) || k.theoretical_occupancy_pct >= 99.5) return "";
  struct Limit {
    double blocks;
    int which;
  };
  std::vector<Limit> limits = {{k.limit_registers, 0}, {k.limit_shared_mem, 1}, {k.limit_warps, 2}, {k.limit_blocks, 3}};
  // Without shared memory, ncu still reports its limit (the blocks-per-SM cap): never the cause then.
  const bool uses_shared = k.shared_static_bytes + k.shared_dynamic_bytes > 0;
  limits.erase(std::remove_if(limits.begin(), limits.end(),
                              [&](const Limit& l) { return std::isnan(l.blocks) || (l.which == 1 && !uses_shared); }),
               limits.end());
  if (limits.empty()) return "";
  const Limit low = *std::min_element(limits.begin(), limits.end(),
                                      [](const Limit& a, const Limit& b) { return a.blocks < b.blocks; });
  const std::string blocks = plural(low.blocks, "block", "blocks");
  const std::string threads = count_text(k.block_size) + " threads";
  switch (low.which) {
    case 0:
      return count_text(k.registers_per_thread) + " registers per thread allow only " + blocks + " of " + threads +
             " per SM";
    case 1:
      return format_bytes(k.shared_static_bytes + k.shared_dynamic_bytes) + " of shared memory per block allow only " +
             blocks + " per SM";
    case 2:
      return "blocks of " + threads + ": only " + blocks + " fit in an SM's warp slots";
    default:
      return "blocks of only " + threads + ": the SM's limit of " + blocks + " leaves warp slots empty";
  }
}

std::string interpret(const KernelLaunch& k) {
  const double us = k.duration_ns / 1e3;
  const std::string dram = pct(k.dram_pct);
  if (us < 5)
    return "launch-bound: " + format_duration_ns(k.duration_ns) + " for " + format_bytes(k.dram_bytes()) +
           " of DRAM traffic: launching and filling the GPU costs about as much as the work; fuse it with its "
           "neighbours or give each launch more work";
  // A device copy reaches about 90% of DRAM peak on large arrays and less on ones that take
  // tens of microseconds (ramp-up and tail): from 70% on, a kernel is about as fast as moving
  // its bytes gets.
  if (k.dram_pct >= 70)
    return "memory-bound at " + dram + " of DRAM peak: near the ceiling; only moving fewer bytes (fusing "
           "kernels, smaller types) makes it faster";
  if (k.dram_pct >= 50)
    return "memory-bound at " + dram + " of DRAM peak, with room left: keep more bytes in flight (16-byte "
           "loads, several independent loads per thread)";
  if (!std::isnan(k.sm_count) && k.grid_size < k.sm_count)
    return "too few blocks: " + plural(k.grid_size, "block", "blocks") + " for " + count_text(k.sm_count) +
           " SMs, so most SMs sit idle (DRAM at " + dram + "); split the work over more blocks";
  const double cache = std::max(std::isnan(k.l2_pct) ? 0.0 : k.l2_pct, std::isnan(k.l1_pct) ? 0.0 : k.l1_pct);
  if (cache >= 60)
    return std::string("bound by on-chip memory: ") + (k.l2_pct >= k.l1_pct ? "L2" : "L1/shared memory") + " at " +
           pct(cache) + " of peak while DRAM is at " + dram +
           ": the same data goes through the caches again and again; keep it in registers or shared memory";
  if (k.sm_pct >= 60)
    return "compute-bound: SM throughput at " + pct(k.sm_pct) + " of peak, DRAM at " + dram +
           ": fewer or cheaper instructions per element would help";
  std::string line = "latency-bound: DRAM at " + dram + " and the SMs at " + pct(k.sm_pct) +
                     " of peak: too few memory requests in flight to hide their latency (more independent loads "
                     "per thread, more warps)";
  const std::string limiter = occupancy_limiter(k);
  if (!limiter.empty())
    line += "; low occupancy (" + pct(k.achieved_occupancy_pct) + ", at most " + pct(k.theoretical_occupancy_pct) +
            " because " + limiter + ")";
  else if (k.waves_per_sm < 1)
    line += "; the grid fills " + fixed(100 * k.waves_per_sm, 0) + "% of one wave of blocks";
  return line;
}

std::string format_duration_ns(double ns) {
  if (std::isnan(ns)) return "n/a";
  if (ns < 1e3) return fixed(ns, 0) + " ns";
  if (ns < 1e6) return fixed(ns / 1e3, ns < 1e5 ? 1 : 0) + " us";
  return fixed(ns / 1e6, 2) + " ms";
}

std::string format_bytes(double bytes) {
  if (std::isnan(bytes)) return "n/a";
  static const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  double v = bytes;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  if (u == 0) return fixed(v, 0) + " B";
  return fixed(v, v < 10 ? 2 : v < 100 ? 1 : 0) + " " + units[u];
}

std::string format_profile_table(const std::vector<KernelSummary>& kernels) {
  struct Row {
    std::vector<std::string> cells;
    std::string note;
  };
  const std::vector<std::string> head = {"#",    "kernel",     "grid x block", "time",
                                         "DRAM", "DRAM bytes", "occupancy",    "regs",
                                         "smem static+dyn", "launches"};
  std::vector<Row> rows;
  int n = 0;
  for (const auto& s : kernels) {
    const KernelLaunch& k = s.median;
    std::string name = k.short_name;
    if (name.size() > 44) name = name.substr(0, 41) + "...";
    rows.push_back({{std::to_string(++n), name, k.grid_dims + " x " + k.block_dims, format_duration_ns(k.duration_ns),
                     pct(k.dram_pct), format_bytes(k.dram_bytes()),
                     pct(k.achieved_occupancy_pct) + " of " + pct(k.theoretical_occupancy_pct),
                     count_text(k.registers_per_thread),
                     format_bytes(k.shared_static_bytes) + " + " + format_bytes(k.shared_dynamic_bytes),
                     std::to_string(s.launches)},
                    interpret(k)});
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) width[c] = head[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < head.size(); ++c) width[c] = std::max(width[c], r.cells[c].size());
  // Text columns (kernel, grid x block) left-aligned, figures right-aligned.
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      out += (c ? "  " : "") + ((c == 1 || c == 2) ? cells[c] + pad : pad + cells[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(head);
  const std::string indent(width[0] + 2, ' ');
  for (const auto& r : rows) out += line(r.cells) + indent + "-> " + r.note + "\n";
  out += "\nDRAM: throughput as a % of the GPU's peak (a device copy of a large array reaches about 90%, a short one\n"
         "less: compare with the bench's copy row); occupancy: achieved of theoretical, as a % of the SM's warp slots.\n"
         "Figures are medians over the launches of each kernel and shape, clocks not locked (as the bench runs).\n";
  return out;
}

std::string explain_ncu_failure(std::string_view output) {
  if (output.find("ERR_NVGPUCTRPERM") != std::string_view::npos)
    return "Nsight Compute may not read this GPU's performance counters (ERR_NVGPUCTRPERM). By default the NVIDIA "
           "driver lets only administrators use them. Either run the profile as root (sudo ./workbook profile ...), "
           "or allow every user, once: write the line\n"
           "    options nvidia NVreg_RestrictProfilingToAdminUsers=0\n"
           "  to /etc/modprobe.d/nvidia-profiling.conf, rebuild the initramfs if your distribution needs it "
           "(sudo update-initramfs -u), and reboot. (Windows and WSL: NVIDIA Control Panel > Developer > Manage GPU "
           "Performance Counters > Allow access to all users.) See https://developer.nvidia.com/ERR_NVGPUCTRPERM";
  if (output.find("LibraryNotLoaded") != std::string_view::npos ||
      output.find("Failed to initialize the profiler") != std::string_view::npos)
    return "Nsight Compute could not start its profiler here: the GPU's performance counters are not reachable from "
           "this environment (sandboxed containers such as gVisor do not pass them through). Profile on a machine "
           "or VM that has the NVIDIA driver itself.";
  if (output.find("nrecognized option") != std::string_view::npos ||
      output.find("nrecognised option") != std::string_view::npos)
    return "this ncu does not know an option workbook profile uses: it needs Nsight Compute 2023 or newer "
           "(see `ncu --version`).";
  return "";
}

bool ncu_profiled_nothing(std::string_view output) {
  return output.find("No kernels were profiled") != std::string_view::npos;
}

std::vector<std::string> not_implemented_lines(std::string_view output) {
  std::vector<std::string> out;
  for (const auto& l : split_lines(output))
    if (l.find("not implemented yet") != std::string::npos &&
        std::find(out.begin(), out.end(), l) == out.end())
      out.push_back(l);
  return out;
}

std::vector<fs::path> default_ncu_dirs() {
  std::vector<fs::path> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) dirs.push_back(fs::path(v) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  // Stand-alone installs: /opt/nvidia/nsight-compute/<version>/ncu, newest first.
  std::vector<fs::path> versions;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/opt/nvidia/nsight-compute", ec))
    if (e.is_directory(ec)) versions.push_back(e.path());
  std::sort(versions.rbegin(), versions.rend());
  dirs.insert(dirs.end(), versions.begin(), versions.end());
  return dirs;
}

fs::path find_ncu(const std::string& explicit_path, const std::vector<fs::path>& search_dirs) {
  if (!explicit_path.empty()) {
    std::error_code ec;
    return fs::is_regular_file(explicit_path, ec) ? fs::path(explicit_path) : fs::path();
  }
  return find_program("ncu", search_dirs);
}

std::string ncu_missing_message(const std::vector<fs::path>& searched) {
  std::vector<std::string> dirs;
  for (const auto& d : searched) dirs.push_back(d.string());
  return "Nsight Compute's command-line profiler `ncu` is not installed (looked on PATH" +
         (dirs.empty() ? std::string() : " and in " + join(dirs, ", ")) +
         ").\n"
         "  It comes with the CUDA Toolkit: on Ubuntu/Debian with NVIDIA's CUDA repository,\n"
         "    sudo apt install cuda-nsight-compute-13-0     (match your toolkit: cuda-nsight-compute-12-8, ...)\n"
         "  or the stand-alone installer from https://developer.nvidia.com/nsight-compute.\n"
         "  Then put its directory on PATH (e.g. export PATH=/usr/local/cuda/bin:$PATH) or pass --ncu /path/to/ncu.";
}

}  // namespace wb::grader
