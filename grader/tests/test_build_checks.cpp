// The build side: the pristine copy, compiler-error excerpts, and the object checks that
// catch chapter code calling the tests' reference.
#include <doctest/doctest.h>

#include "grader/build.hpp"
#include "grader/util.hpp"
#include "test_common.hpp"

using namespace wb::grader;
using grader_test::TempDir;
using grader_test::write;

TEST_CASE("the pristine copy leaves out solutions, builds and the output, and follows changes") {
  TempDir dir;
  const fs::path src = dir / "src";
  write(src / "CMakeLists.txt", "project(x)\n");
  write(src / "tests/04_x/test.cu", "test\n");
  write(src / "solutions/04_x/k.cu", "the reference\n");
  write(src / "build/CMakeCache.txt", "cache\n");
  write(src / "my-build/CMakeCache.txt", "cache\n");
  write(src / "out/grades/report.json", "{}\n");
  write(src / ".git/HEAD", "ref\n");
  sync_source_tree(src, dir / "copy", {src / "out"});
  CHECK(fs::exists(dir / "copy/CMakeLists.txt"));
  CHECK(fs::exists(dir / "copy/tests/04_x/test.cu"));
  CHECK_FALSE(fs::exists(dir / "copy/solutions"));
  CHECK_FALSE(fs::exists(dir / "copy/build"));
  CHECK_FALSE(fs::exists(dir / "copy/my-build"));
  CHECK_FALSE(fs::exists(dir / "copy/out"));
  CHECK_FALSE(fs::exists(dir / "copy/.git"));
  CHECK(fs::last_write_time(dir / "copy/tests/04_x/test.cu") == fs::last_write_time(src / "tests/04_x/test.cu"));

  // A change is copied, a removal removes, an unchanged file keeps its time stamp.
  const auto before = fs::last_write_time(dir / "copy/CMakeLists.txt");
  write(src / "tests/04_x/test.cu", "test, fixed\n");
  fs::last_write_time(src / "tests/04_x/test.cu", fs::file_time_type::clock::now() + std::chrono::seconds(5));
  fs::remove(src / "tests/04_x/test.cu.old");
  write(dir / "copy/tests/04_x/stale.cu", "gone upstream\n");
  sync_source_tree(src, dir / "copy", {src / "out"});
  CHECK(grader_test::read(dir / "copy/tests/04_x/test.cu") == "test, fixed\n");
  CHECK_FALSE(fs::exists(dir / "copy/tests/04_x/stale.cu"));
  CHECK(fs::last_write_time(dir / "copy/CMakeLists.txt") == before);
}

TEST_CASE("compile errors are cut down to the first errors, with short paths") {
  const std::string log =
      "[1/3] Building CUDA object tests/CMakeFiles/ch04_student.dir/k.cu.o\n"
      "FAILED: tests/CMakeFiles/ch04_student.dir/k.cu.o\n"
      "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -I/work/out/.work/tree/chapters ... -c /work/out/.work/student/04_x/k.cu\n"
      "/work/out/.work/student/04_x/k.cu(12): error: identifier \"blockIdx_x\" is undefined\n"
      "      y[blockIdx_x] = 0;\n"
      "        ^\n"
      "\n"
      "1 error detected in the compilation of \"/work/out/.work/student/04_x/k.cu\".\n"
      "ninja: build stopped: subcommand failed.\n";
  const std::string e = compile_error_excerpt(log, {"/work/out/.work/student"});
  CHECK(e.find("04_x/k.cu(12): error: identifier \"blockIdx_x\" is undefined") == 0);
  CHECK(e.find("y[blockIdx_x] = 0;") != std::string::npos);
  CHECK(e.find("nvcc") == std::string::npos);
  CHECK(e.find("ninja:") == std::string::npos);
  CHECK(e.find("/work/out") == std::string::npos);

  const std::string link = "[3/3] Linking CXX executable bin/test_04_correctness_student\n"
                           "/usr/bin/ld: libch04_student.a(k.cu.o): in function `f()':\n"
                           "k.cu:(.text+0x1): undefined reference to `ch04::helper()'\n"
                           "collect2: error: ld returned 1 exit status\n";
  CHECK(compile_error_excerpt(link, {}).find("undefined reference to `ch04::helper()'") != std::string::npos);
}

TEST_CASE("nm output: the student's undefined symbols that the tests' code defines") {
  const std::string nm =
      "libch04_student.a[softmax_fused.cu.o]: _ZN4ch0413softmax_fusedEPKfPfiiP11CUstream_st T 0 40\n"
      "libch04_student.a[softmax_fused.cu.o]: _ZN4ch049reference12softmax_rowsESt4spanIKfLm18446744073709551615EEii U\n"
      "libch04_student.a[softmax_fused.cu.o]: cudaLaunchKernel U\n"
      "libch04_student.a[softmax_fused.cu.o]: _ZN2wb11cuda_checkE9cudaErrorPKcS2_i U\n"
      "libch04_student.a[reference.cpp.o]: _ZN4ch049reference12softmax_rowsESt4spanIKfLm18446744073709551615EEii T 0 100\n"
      "libch04_student.a[reference.cpp.o]: _ZN4ch049reference13random_logitsEmRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE T 100 50\n"
      "libch04_student.a[reference.cpp.o]: local_helper t 150 5\n";
  const auto symbols = parse_nm(nm);
  REQUIRE(symbols.size() == 7);
  CHECK(symbols[1].type == 'U');
  const auto hits = cross_references(symbols, {"softmax_fused.cu.o", "softmax_unfused.cu.o"});
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].find("softmax_rows") != std::string::npos);
  CHECK(cross_references(symbols, {"reference.cpp.o"}).empty());
}

TEST_CASE("nm output: what the student's members define that the tests' code or a library defines too") {
  const std::string nm =
      "libch04_student.a[softmax_fused.cu.o]: _ZN4ch0413softmax_fusedEPKfPfiiP11CUstream_st T 0 40\n"
      "libch04_student.a[softmax_fused.cu.o]: _ZN4ch049reference13check_softmaxEv T 40 10\n"
      "libch04_student.a[softmax_fused.cu.o]: _ZNSt6vectorIfSaIfEE17_M_realloc_insertEv W 50 10\n"
      "libch04_student.a[softmax_fused.cu.o]: _ZN2wb10cuda_checkEv W 60 10\n"
      "libch04_student.a[softmax_fused.cu.o]: cudaEventElapsedTime T 70 10\n"
      "libch04_student.a[softmax_fused.cu.o]: clock_gettime W 80 10\n"
      "libch04_student.a[softmax_fused.cu.o]: local_helper t 90 5\n"
      "libch04_student.a[softmax_fused.cu.o]: cudaMalloc U\n";
  const std::string harness_nm =
      "libch04_student.a[reference.cpp.o]: _ZN4ch049reference13check_softmaxEv T 0 100\n"
      "libch04_student.a[reference.cpp.o]: _ZNSt6vectorIfSaIfEE17_M_realloc_insertEv W 100 10\n"
      "tests/CMakeFiles/ch04_obj_test_correctness_cu.dir/04_fused_softmax/test_correctness.cu.o: "
      "_ZN2wb10cuda_checkEv W 0 10\n"
      "/usr/local/cuda/lib64/libcudart.so.13: cudaEventElapsedTime@@libcudart.so.13 T 100 20\n"
      "/lib/x86_64-linux-gnu/libc.so.6: clock_gettime@@GLIBC_2.17 T 200 20\n"
      "/lib/x86_64-linux-gnu/libc.so.6: local_helper t 0 1\n";
  const auto student = parse_nm(nm);
  const auto harness = parse_nm(harness_nm);
  REQUIRE(harness.size() == 6);
  CHECK(harness[2].member == "test_correctness.cu.o");
  CHECK(harness[3].name == "cudaEventElapsedTime");  // the symbol version is not part of the name
  CHECK(harness[3].member == "libcudart.so.13");
  // The API function is the student's own; the shared template and inline function are weak on
  // both sides; a local symbol binds nothing. The rest would stand in for the tests' or the
  // libraries' own: a checker, the CUDA event timer, and (weak against strong only) the clock.
  CHECK(redefinitions(student, harness) ==
        std::vector<std::string>{"_ZN4ch049reference13check_softmaxEv", "clock_gettime", "cudaEventElapsedTime"});
  CHECK(redefinitions(harness, {}).empty());
}

TEST_CASE("the grading tree holds the references that later chapters build on, and no other solution") {
  TempDir dir;
  const fs::path src = dir / "src";
  write(src / "tests/04_x/chapter.json",
        R"({"id": "04", "slug": "04_x", "editable": ["k.cu", "h.cu"], "tests": [{"file": "t.cu", "kind": "correctness"}]})");
  write(src / "tests/05_y/chapter.json",
        R"({"id": "05", "slug": "05_y", "editable": ["y.cu"], "tests": [{"file": "t.cu", "kind": "correctness"}]})");
  write(src / "tests/07_z/chapter.json",
        R"({"id": "07", "slug": "07_z", "editable": ["z.cu"], "uses": ["04"], "tests": [{"file": "t.cu", "kind": "correctness"}]})");
  write(src / "solutions/04_x/k.cu", "the reference k\n");
  write(src / "solutions/04_x/h.cu", "the reference h\n");
  write(src / "solutions/04_x/fast/k.cu", "a faster k\n");
  write(src / "solutions/04_x/notes.md", "notes\n");
  write(src / "solutions/05_y/y.cu", "the reference y\n");
  write(src / "solutions/07_z/z.cu", "the reference z\n");
  sync_source_tree(src, dir / "copy", {});
  CHECK(grader_test::read(dir / "copy/solutions/04_x/k.cu") == "the reference k\n");
  CHECK(fs::exists(dir / "copy/solutions/04_x/h.cu"));
  CHECK_FALSE(fs::exists(dir / "copy/solutions/04_x/fast"));
  CHECK_FALSE(fs::exists(dir / "copy/solutions/04_x/notes.md"));
  CHECK_FALSE(fs::exists(dir / "copy/solutions/05_y"));
  CHECK_FALSE(fs::exists(dir / "copy/solutions/07_z"));

  // A manifest that stops using a chapter takes its reference out of the copy.
  write(src / "tests/07_z/chapter.json",
        R"({"id": "07", "slug": "07_z", "editable": ["z.cu"], "tests": [{"file": "t.cu", "kind": "correctness"}]})");
  sync_source_tree(src, dir / "copy", {});
  CHECK_FALSE(fs::exists(dir / "copy/solutions"));
}

TEST_CASE("cache variables of an existing build are read") {
  TempDir dir;
  write(dir / "CMakeCache.txt", "//comment\nCMAKE_CUDA_ARCHITECTURES:STRING=90\nWB_CHAPTERS:STRING=00;04\nWB_BUILDS:STRING=student\n");
  CHECK(cached_cuda_architectures(dir.path()) == "90");
  CHECK(cached_variable(dir.path(), "WB_CHAPTERS") == "00;04");
  CHECK(cached_variable(dir.path(), "MISSING").empty());
}
