#include "wb/rubric.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace wb {

std::string rubric_path() {
  if (const char* env = std::getenv("WB_RUBRIC"); env && *env) return env;
  return WB_RUBRIC_PATH;
}

double pass_mark(const std::string& chapter, const std::string& metric, const std::string& bound) {
  const std::string path = rubric_path();
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read the rubric " + path +
                             " (the timing pass marks live there; WB_RUBRIC names another file)");
  nlohmann::json rubric;
  try {
    rubric = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("the rubric " + path + " is not valid JSON: " + e.what());
  }
  const auto& marks = rubric.value("chapters", nlohmann::json::object())
                          .value(chapter, nlohmann::json::object())
                          .value("pass_marks", nlohmann::json::array());
  for (const auto& m : marks)
    if (m.value("metric", "") == metric && m.contains(bound) && m[bound].is_number()) return m[bound].get<double>();
  throw std::runtime_error("the rubric " + path + " has no pass mark \"" + bound + "\" for chapter " + chapter +
                           ", metric \"" + metric + "\" (chapters." + chapter + ".pass_marks)");
}

}  // namespace wb
