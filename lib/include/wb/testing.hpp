#pragma once
// Test helpers on top of doctest; include only from tests (they link wb::test_main).
//
//   TEST_CASE("fused softmax matches the reference") {
//     WB_REQUIRE_GPU();                       // skipped (exit 77) without a CUDA device
//     ...
//     WB_CHECK_RESULT(wb::compare(got, ref, spec));
//   }
//
// Hints: a failure message may carry lines starting with "hint:"; the scorecard shows them.
#include <doctest/doctest.h>

#include <string>

// A failure message streams names held in `const char*` (name_of(impl), a reason chosen at run
// time): doctest prints every pointer as its address ("ch04 0x55e1bfea40b0 softmax" in a real
// log), so C strings are printed as their text here. (doctest's own switch for it,
// DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING, does not compile in 2.4.9, Debian's package.)
namespace doctest {
template <>
struct StringMaker<const char*> {
  static String convert(const char* text) { return text ? String(text) : String("(null)"); }
};
template <>
struct StringMaker<char*> {
  static String convert(const char* text) { return StringMaker<const char*>::convert(text); }
};
}  // namespace doctest

#include "wb/compare.hpp"
#include "wb/device.hpp"

namespace wb::testing {
// Records that the current test case was skipped for lack of a device.
void mark_skipped(const std::string& why);
// Attaches a measured value to the current test case's report entry (e.g. a timing stat
// or a ratio) so the scorecard and the grader can show it.
void record_metric(const std::string& key, double value);
void record_note(const std::string& text);
}  // namespace wb::testing

#define WB_REQUIRE_GPU()                                        \
  do {                                                          \
    if (!::wb::has_cuda_device()) {                             \
      ::wb::testing::mark_skipped("skipped: no CUDA device");   \
      return;                                                   \
    }                                                           \
  } while (0)

#define WB_CHECK_RESULT(result_expr)                            \
  do {                                                          \
    const ::wb::CompareResult wb_result_ = (result_expr);       \
    if (!wb_result_.ok) FAIL_CHECK(wb_result_.message);         \
  } while (0)

#define WB_REQUIRE_RESULT(result_expr)                          \
  do {                                                          \
    const ::wb::CompareResult wb_result_ = (result_expr);       \
    if (!wb_result_.ok) FAIL(wb_result_.message);               \
  } while (0)
