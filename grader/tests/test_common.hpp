#pragma once
// Helpers for the grader's host tests: scratch directories, files, hand-made archives.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace grader_test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "wb-grader-test-XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& p) const { return path_ / p; }

 private:
  fs::path path_;
};

inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline fs::path helper() { return WB_GRADER_TEST_HELPER; }

// A POSIX ustar archive written by hand, so tests can make the archives a hostile student
// would: absolute names, "..", links.
struct TarMember {
  std::string name;
  std::string data;
  char type = '0';          // '0' file, '2' symlink, '1' hard link, '5' directory
  std::string link;
};

inline std::string tar_archive(const std::vector<TarMember>& members) {
  std::string out;
  for (const auto& m : members) {
    char h[512];
    std::memset(h, 0, sizeof h);
    std::strncpy(h, m.name.c_str(), 100);
    std::snprintf(h + 100, 8, "%07o", m.type == '5' ? 0755 : 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(m.type == '0' ? m.data.size() : 0));
    std::snprintf(h + 136, 12, "%011o", 1700000000);
    h[156] = m.type;
    std::strncpy(h + 157, m.link.c_str(), 100);
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    out.append(h, 512);
    if (m.type == '0') {
      out += m.data;
      out.append((512 - m.data.size() % 512) % 512, '\0');
    }
  }
  out.append(1024, '\0');
  return out;
}

}  // namespace grader_test
