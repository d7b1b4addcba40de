#pragma once
// The last test case of a chapter's correctness suite: every kernel of the reference ran.
//
// A reference with several dispatch paths (a warp per row for short rows, a block per row,
// one instantiation per element type) is only tested where some test shape reaches it. The
// recording starts when the test binary loads (below: a static initializer, so before
// main() and before any test's GPU work); the check lists the kernels whose mangled name
// starts with the chapter's prefix and that never ran.
//
//   #include "../lib/kernel_coverage_test.hpp"
//   ...  (every other test case)
//   TEST_CASE("kernel coverage: every kernel of the reference ran in this suite") {
//     WB_REQUIRE_GPU();
//     kernel_coverage_test::check_reference("_ZN4ch04", "04");
//   }
//
// It is checked on the reference builds only (a student's kernels are theirs to arrange),
// and not under compute-sanitizer, where CUPTI cannot record and the suites run their
// quick shapes.
#include <string>

#include "wb/kernel_coverage.hpp"
#include "wb/testing.hpp"

namespace kernel_coverage_test {

// "" while recording, else why not (no CUDA device, CUPTI unavailable, compute-sanitizer).
inline const std::string recording = wb::coverage::start_recording();

// `prefix`: the mangled-name prefix of the reference's kernels ("_ZN4ch04": namespace ch04;
// "_ZN4ch087kernels": namespace ch08::kernels). `chapter`: "04", for the messages.
inline void check_reference(const std::string& prefix, const std::string& chapter) {
  const std::string build = wb::coverage::this_build();
  if (build != "solution" && build != "fast") {
    wb::testing::mark_skipped("skipped: kernel coverage is checked on the reference builds (this is " +
                              build + ")");
    return;
  }
  if (!recording.empty() || wb::coverage::quick()) {
    wb::testing::mark_skipped("skipped: kernel coverage not recorded: " +
                              (recording.empty() ? std::string("quick run (WB_QUICK)") : recording));
    return;
  }
  const std::string missing = wb::coverage::unlaunched_kernels(prefix, chapter);
  if (!missing.empty() && wb::coverage::kernels_run().empty())
    FAIL_CHECK(missing << "\nhint: no kernel at all ran before this check: doctest runs the test "
                          "cases of a file in the order of their lines, so this one must be the "
                          "last of its file.");
  else if (!missing.empty())
    FAIL_CHECK(missing);
  std::string why_not;
  MESSAGE("ch" << chapter << " kernel coverage (" << build << " build): "
               << wb::coverage::kernels_compiled(prefix, &why_not).size() << " kernels compiled, "
               << wb::coverage::kernels_run().size() << " distinct kernels run in this process");
}

}  // namespace kernel_coverage_test
