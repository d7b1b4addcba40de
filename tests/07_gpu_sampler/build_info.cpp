// Compiled into the chapter library, so it knows which build it belongs to (the test
// sources are compiled once for every build and ask at run time).
namespace ch07_build {
const char* name() { return WB_BUILD_NAME; }
}  // namespace ch07_build
