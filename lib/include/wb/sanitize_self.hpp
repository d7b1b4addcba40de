#pragma once
// Runs this test binary again under compute-sanitizer, for a test that asks "does the chapter
// code race or touch memory it does not own?". Some mistakes give right answers on a kind
// schedule (a block reduction missing a __syncthreads) or read only a few bytes past an
// allocation (a float4 load of the last partial pack): no output comparison sees them, the
// sanitizer does.
//
//   TEST_CASE("workload" * doctest::skip()) { ...call the chapter's entry points... }
//   const wb::SanitizerRun r = wb::run_self_under_sanitizer("racecheck", "workload");
#include <string>

namespace wb {

struct SanitizerRun {
  bool ran = false;       // false: see `problem`
  int errors = 0;         // from the tool's summary line
  std::string excerpt;    // the tool's first report lines
  std::string problem;    // why it did not run ("compute-sanitizer was not found ...")
  double seconds = 0;
};

// compute-sanitizer --tool <tool> <this binary> --no-skip -tc=<test_case>, with
// WB_SANITIZER_CHILD=1 in the child's environment.
SanitizerRun run_self_under_sanitizer(const std::string& tool, const std::string& test_case);

// True in the child started above.
bool is_sanitizer_child();

}  // namespace wb
