#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <sstream>
#include <string>

#include "wb/guarded_buffer.hpp"

namespace wb {
namespace {

struct Changed {
  std::size_t elements = 0;  // elements with at least one byte that is not the pattern
  std::size_t first = 0, last = 0;  // their positions within the band, in elements
};

Changed changed_elements(std::span<const unsigned char> band, std::size_t element_bytes) {
  Changed c;
  for (std::size_t e = 0; e < band.size() / element_bytes; ++e) {
    const auto bytes = band.subspan(e * element_bytes, element_bytes);
    if (std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == kGuardByte; }))
      continue;
    if (c.elements++ == 0) c.first = e;
    c.last = e;
  }
  return c;
}

std::string at(const std::string& name, long long index) {
  return name + "[" + std::to_string(index) + "]";
}

}  // namespace

std::string describe_overrun(std::span<const unsigned char> before,
                             std::span<const unsigned char> after, std::size_t element_bytes,
                             std::size_t count, const std::string& name) {
  std::string message;
  const Changed past_end = changed_elements(after, element_bytes);
  if (past_end.elements > 0) {
    const long long first = static_cast<long long>(count + past_end.first);
    const long long last = static_cast<long long>(count + past_end.last);
    message += "wrote " + std::to_string(past_end.elements) + " element(s) past the end of " +
               name + " (" + name + " has " + std::to_string(count) + "; the first write was " +
               at(name, first) + (last != first ? ", the last " + at(name, last) : "") + ")";
  }
  const Changed before_start = changed_elements(before, element_bytes);
  if (before_start.elements > 0) {
    const std::size_t band = before.size() / element_bytes;
    const long long first = -static_cast<long long>(band - before_start.first);
    const long long last = -static_cast<long long>(band - before_start.last);
    message += std::string(message.empty() ? "wrote " : "; and ") +
               std::to_string(before_start.elements) + " element(s) before the start of " +
               name + " (" + at(name, first) + (last != first ? " to " + at(name, last) : "") +
               ")";
  }
  return message;
}

std::string describe_input_change(std::span<const float> before, std::span<const float> after,
                                  const std::string& name) {
  const std::size_t n = std::min(before.size(), after.size());
  std::size_t changed = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&before[i], &after[i], sizeof(float)) != 0 && changed++ == 0) first = i;
  if (changed == 0) return "";
  std::ostringstream text;
  text << "changed " << changed << " of the " << n << " elements of its input " << name
       << " (the first: " << at(name, static_cast<long long>(first)) << " was " << before[first]
       << ", is now " << after[first] << ")";
  return text.str();
}

}  // namespace wb
