// Kernel coverage: CUPTI activity records for the kernels that ran, the executable's ELF
// symbol table for the kernels that exist. See wb/kernel_coverage.hpp.
#include "wb/kernel_coverage.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#include <elf.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "wb/device.hpp"
#include "wb/test_environment.hpp"

namespace wb::coverage {
namespace {

#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
#else
using KernelRecord = CUpti_ActivityKernel9;
#endif

std::mutex g_mutex;
std::set<std::string> g_run;        // mangled names of the kernels that ran
std::string g_status = "not started";  // "" while recording
bool g_started = false;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  {
    const std::lock_guard lock(g_mutex);
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
          record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      const auto* kernel = reinterpret_cast<const KernelRecord*>(record);
      if (kernel->name) g_run.insert(kernel->name);
    }
  }
  std::free(buffer);
}

std::string cupti_error(const char* what, CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return std::string(what) + " failed: " + (text ? text : "unknown CUPTI error");
}

// Every symbol name of the ELF file at `path` (.symtab, else .dynsym).
std::vector<std::string> elf_symbol_names(const std::string& path, std::string* why_not) {
  std::ifstream file(path, std::ios::binary);
  Elf64_Ehdr header{};
  if (!file.read(reinterpret_cast<char*>(&header), sizeof header) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) {
    *why_not = path + " is not a 64-bit ELF file";
    return {};
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  file.seekg(static_cast<std::streamoff>(header.e_shoff));
  file.read(reinterpret_cast<char*>(sections.data()),
            static_cast<std::streamsize>(sections.size() * sizeof(Elf64_Shdr)));
  const auto read_section = [&](const Elf64_Shdr& s) {
    std::string bytes(s.sh_size, '\0');
    file.seekg(static_cast<std::streamoff>(s.sh_offset));
    file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  };
  std::vector<std::string> names;
  for (const unsigned type : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (const Elf64_Shdr& s : sections) {
      if (s.sh_type != type || s.sh_link >= sections.size()) continue;
      const std::string symbols = read_section(s);
      const std::string strings = read_section(sections[s.sh_link]);
      for (std::size_t off = 0; off + sizeof(Elf64_Sym) <= symbols.size(); off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, symbols.data() + off, sizeof sym);
        if (sym.st_name < strings.size()) names.emplace_back(strings.c_str() + sym.st_name);
      }
    }
    if (!names.empty()) break;
  }
  if (names.empty()) *why_not = path + " has no symbol table (stripped?)";
  return names;
}

// CUPTI reports mangled names; compare demangled too, should a version report them so.
bool same_kernel(const std::string& compiled, const std::set<std::string>& run) {
  if (run.count(compiled)) return true;
  const std::string pretty = demangle(compiled);
  for (const std::string& r : run)
    if (r == pretty || demangle(r) == pretty) return true;
  return false;
}

}  // namespace

// nvcc's host stub of kernel _Z<k> is the function __device_stub__Z<k> (and its static locals
// __handle, __tmp): the symbol holds "<length>__device_stub__Z...", where <length> counts the
// identifier. The kernel's mangled name is the identifier less "__device_stub_".
std::string kernel_of_stub_symbol(const std::string& symbol) {
  static const std::string kStub = "__device_stub__Z";
  const std::size_t at = symbol.find(kStub);
  if (at == std::string::npos) return "";
  std::size_t digits = at;
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(symbol[digits - 1]))) --digits;
  if (digits == at) return "";
  const std::size_t length = std::stoul(symbol.substr(digits, at - digits));
  if (at + length > symbol.size() || length <= kStub.size()) return "";
  return symbol.substr(at + kStub.size() - 2, length - (kStub.size() - 2));
}

std::string start_recording() {
  const std::lock_guard lock(g_mutex);
  if (g_started) return g_status;
  g_started = true;
  if (started_under_sanitizer()) return g_status = "running under compute-sanitizer (CUPTI is its own)";
  if (!has_cuda_device()) return g_status = "no CUDA device";
  if (const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
      r != CUPTI_SUCCESS)
    return g_status = cupti_error("cuptiActivityRegisterCallbacks", r);
  if (const CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      r != CUPTI_SUCCESS)
    return g_status = cupti_error("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
  return g_status = "";
}

std::set<std::string> kernels_run() {
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const std::lock_guard lock(g_mutex);
  return g_run;
}

std::vector<std::string> kernels_compiled(const std::string& prefix, std::string* why_not) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    *why_not = "cannot read /proc/self/exe: " + ec.message();
    return {};
  }
  std::set<std::string> kernels;
  for (const std::string& symbol : elf_symbol_names(self, why_not)) {
    const std::string kernel = kernel_of_stub_symbol(symbol);
    if (!kernel.empty() && kernel.rfind(prefix, 0) == 0) kernels.insert(kernel);
  }
  return {kernels.begin(), kernels.end()};
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text ? text : mangled;
  std::free(text);
  return out;
}

std::string this_build() {
  std::error_code ec;
  const std::string name =
      std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
  // test_NN_wrong_<name>, test_NN_variant_<name>_<kind>, test_NN_<kind>_<build>
  if (name.find("_wrong_") != std::string::npos) return "wrong";
  if (name.find("_variant_") != std::string::npos) return "variant";
  const std::size_t last = name.rfind('_');
  return last == std::string::npos ? name : name.substr(last + 1);
}

// Both read the environment as it was when the tests started (wb/test_environment.hpp).
bool quick() { return switched_on(test_environment("WB_QUICK")) || started_under_sanitizer(); }

bool racecheck() { return test_environment("WB_SANITIZE_TOOL") == "racecheck"; }

std::string unlaunched_kernels(const std::string& prefix, const std::string& chapter) {
  std::string why_not;
  const std::vector<std::string> compiled = kernels_compiled(prefix, &why_not);
  if (compiled.empty())
    return "ch" + chapter + " kernel coverage: found no kernel named " + prefix +
           "... in this executable" + (why_not.empty() ? "" : " (" + why_not + ")") +
           ".\nhint: the chapter's kernels live in namespace ch" + chapter + ".";
  const std::set<std::string> run = kernels_run();
  std::vector<std::string> missing, ran;
  for (const std::string& k : compiled) (same_kernel(k, run) ? ran : missing).push_back(k);
  if (missing.empty()) return "";
  std::ostringstream text;
  text << "ch" << chapter << " kernel coverage: " << missing.size() << " of the "
       << compiled.size() << " kernels (template instantiations = dispatch branches) of the "
       << this_build() << " build never ran in this correctness suite:\n";
  for (const std::string& k : missing) text << "  never ran: " << demangle(k) << "\n";
  for (const std::string& k : ran) text << "  ran:       " << demangle(k) << "\n";
  text << "rule: every path of the reference is tested: each dispatch branch must be reached "
          "by some test shape and by the edge-case data.\nhint: add a shape (rows, cols, "
          "alignment, or launch pattern) that takes the missing branch, or remove the branch.";
  return text.str();
}

}  // namespace wb::coverage
