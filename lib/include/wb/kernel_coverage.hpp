#pragma once
// Which kernels of a chapter's library the tests actually ran.
//
// A reference with several dispatch paths (a warp per row for short rows, a block per row,
// split rows, batches of long rows, a path for graph capture) is only tested where some test
// shape or some data set reaches it. This records every kernel the process runs (CUPTI
// activity records, which also see kernels replayed from CUDA graphs and cooperative
// launches) and lists every kernel compiled into the executable (from its symbol table:
// nvcc leaves a host stub named __device_stub__<mangled kernel name> for each), so a test
// at the end of a suite can name the kernels (= template instantiations = dispatch branches)
// that no test reached.
//
//   const std::string recording = wb::coverage::start_recording();  // before any GPU work
//   ...
//   const std::string missing = wb::coverage::unlaunched_kernels("_ZN4ch04");
#include <set>
#include <string>
#include <vector>

namespace wb::coverage {

// Starts recording the kernels this process runs. Returns "" when recording, else why not
// (no CUDA device, CUPTI unavailable, running under compute-sanitizer). Idempotent; safe to
// call from a static initializer.
std::string start_recording();

// Mangled names of the kernels that ran since start_recording() (waits for the device and
// flushes CUPTI's buffers first).
std::set<std::string> kernels_run();

// Mangled names of the kernels compiled into this executable whose mangled name starts with
// `prefix` ("_ZN4ch04": the kernels of namespace ch04). `why_not` gets the reason when the
// symbol table cannot be read (a stripped binary).
std::vector<std::string> kernels_compiled(const std::string& prefix, std::string* why_not);

// The mangled kernel name behind one of nvcc's host-stub symbols
// ("_Z98__device_stub__ZN4ch04...14row_max_kernelEPKfPfiPKfPfi" -> "_ZN4ch04...PKfPfi"; its
// static locals "_ZZ98__device_stub__Z...E8__handle" too), or "" for any other symbol.
std::string kernel_of_stub_symbol(const std::string& symbol);

// "ch04::(anonymous namespace)::softmax_block_per_row<128, 4>(...)" for a mangled name.
std::string demangle(const std::string& mangled);

// The build this test binary tests, from its file name test_<NN>_<kind>_<build> (solution,
// fast, student) or test_<NN>_wrong_<name> / test_<NN>_variant_<name>_<kind> (wrong,
// variant).
std::string this_build();

// True under compute-sanitizer (or WB_QUICK=1): the tests then leave out their largest
// shapes, which take minutes instrumented.
bool quick();

// True when the process runs under compute-sanitizer's racecheck, as .ci/sanitize-suites and
// the grader's --sanitize run it (they set WB_SANITIZE_TOOL=racecheck): the slowest tool, it
// follows every shared-memory access, so a suite may shrink its data further there (every
// path still runs; racecheck needs the accesses, not the statistics).
bool racecheck();

// The check itself: "" when every kernel compiled with `prefix` ran, else a message that
// lists the ones that never did (demangled) and the ones that did.
std::string unlaunched_kernels(const std::string& prefix, const std::string& chapter);

}  // namespace wb::coverage
