#pragma once
// Starters call wb::not_implemented("...") where the student's code goes. The test runner
// reports such a test as "to do" instead of "failed", so a fresh clone reads as a to-do list.
#include <stdexcept>
#include <string>

namespace wb {

class NotImplemented : public std::logic_error {
 public:
  explicit NotImplemented(const std::string& what)
      : std::logic_error("not implemented yet: " + what) {}
};

[[noreturn]] inline void not_implemented(const std::string& what) { throw NotImplemented(what); }

}  // namespace wb
