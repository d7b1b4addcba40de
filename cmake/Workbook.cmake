# wb_add_chapter(tests/NN_slug): builds one chapter from its manifest, tests/NN_slug/chapter.json.
#
# For every build in WB_BUILDS (solution, student) it makes
#   - a static library  ch<NN>_<build>  from the chapter's editable files, taken from
#     solutions/<slug>/ or ${WB_STUDENT_ROOT}/<slug>/, compiled against the pristine API
#     header(s) in chapters/<slug>/ (so an edited header in a submission is never used);
#   - one test executable per entry in "tests":  test_<NN>_<kind>_<build>
#     registered with CTest as  <NN>.<kind>.<build>  with labels
#     ch<NN>;<gpu|cpu>;<kind>;<build>  and SKIP_RETURN_CODE 77.
# Each entry of "fixtures" (known-wrong versions of an editable file, kept under tests/) is
# built against one test and registered as  <NN>.fixture.<name>: it passes when the test
# binary's output matches the fixture's "expect" regular expression, i.e. when the tests
# catch that mistake and name the rule it broke.

set(WB_STUDENT_ROOT "${PROJECT_SOURCE_DIR}/chapters" CACHE PATH
    "Where the student's chapter files are read from (the grader points this at a submission)")
set(WB_BUILDS "solution;student" CACHE STRING "Which builds of each chapter to make")
set(WB_CHAPTERS "" CACHE STRING "Only these chapter ids (e.g. 00;04); empty means all")

function(_wb_json_list out json)
  # Turns a JSON array of strings into a CMake list.
  set(items "")
  string(JSON n ERROR_VARIABLE err LENGTH "${json}")
  if(NOT err AND n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON item GET "${json}" ${i})
      list(APPEND items "${item}")
    endforeach()
  endif()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()

# A test source depends only on the chapter's API header, so it is compiled once (an object
# library) and linked against each build: solution, student, and every fixture.
function(_wb_test_objects obj source slug dir)
  if(NOT TARGET ${obj})
    add_library(${obj} OBJECT ${source})
    target_include_directories(${obj} PRIVATE "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                              "${PROJECT_SOURCE_DIR}/${dir}")
    target_link_libraries(${obj} PRIVATE wb::lib wb::doctest)
  endif()
endfunction()

function(_wb_add_test_binary target obj chapter_lib)
  add_executable(${target} $<TARGET_OBJECTS:${obj}>)
  target_link_libraries(${target} PRIVATE ${chapter_lib} wb::test_main)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

function(wb_add_chapter dir)
  set(manifest "${PROJECT_SOURCE_DIR}/${dir}/chapter.json")
  if(NOT EXISTS "${manifest}")
    message(FATAL_ERROR "workbook: ${dir} has no chapter.json manifest")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${manifest}")
  file(READ "${manifest}" j)
  string(JSON id GET "${j}" id)
  string(JSON slug GET "${j}" slug)
  if(WB_CHAPTERS AND NOT id IN_LIST WB_CHAPTERS)
    return()
  endif()
  string(JSON editable_json GET "${j}" editable)
  _wb_json_list(editable "${editable_json}")
  string(JSON extra_json ERROR_VARIABLE no_extra GET "${j}" support)
  set(support "")
  if(NOT no_extra)
    _wb_json_list(support_rel "${extra_json}")
    foreach(f IN LISTS support_rel)
      list(APPEND support "${PROJECT_SOURCE_DIR}/${dir}/${f}")
    endforeach()
  endif()
  string(JSON tests_json GET "${j}" tests)
  string(JSON ntests LENGTH "${tests_json}")
  math(EXPR last_test "${ntests} - 1")

  foreach(build IN LISTS WB_BUILDS)
    if(build STREQUAL "solution")
      set(src_root "${PROJECT_SOURCE_DIR}/solutions/${slug}")
    else()
      set(src_root "${WB_STUDENT_ROOT}/${slug}")
    endif()
    set(sources "")
    foreach(f IN LISTS editable)
      list(APPEND sources "${src_root}/${f}")
    endforeach()
    set(lib ch${id}_${build})
    add_library(${lib} STATIC ${sources} ${support})
    target_include_directories(${lib} PUBLIC "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                             "${PROJECT_SOURCE_DIR}/${dir}")
    target_link_libraries(${lib} PUBLIC wb::lib)
    target_compile_definitions(${lib} PUBLIC WB_BUILD_NAME="${build}" WB_CHAPTER_ID="${id}")

    foreach(i RANGE ${last_test})
      string(JSON t GET "${tests_json}" ${i})
      string(JSON file GET "${t}" file)
      string(JSON kind GET "${t}" kind)
      string(JSON gpu ERROR_VARIABLE no_gpu GET "${t}" gpu)
      if(no_gpu)
        set(gpu ON)
      endif()
      string(JSON timeout ERROR_VARIABLE no_timeout GET "${t}" timeout)
      if(no_timeout)
        set(timeout 600)
      endif()
      if(gpu)
        set(where gpu)
      else()
        set(where cpu)
      endif()
      set(target test_${id}_${kind}_${build})
      string(MAKE_C_IDENTIFIER "ch${id}_obj_${file}" obj)
      _wb_test_objects(${obj} "${PROJECT_SOURCE_DIR}/${dir}/${file}" ${slug} ${dir})
      _wb_add_test_binary(${target} ${obj} ${lib})
      add_test(NAME ${id}.${kind}.${build} COMMAND ${target})
      set_tests_properties(${id}.${kind}.${build} PROPERTIES
        LABELS "ch${id};${where};${kind};${build}"
        SKIP_RETURN_CODE 77
        TIMEOUT ${timeout}
        RESOURCE_LOCK gpu)
    endforeach()
  endforeach()

  # The chapter's bench program (its own main): bench_<NN>_<build>.
  string(JSON bench_file ERROR_VARIABLE no_bench GET "${j}" bench)
  if(NOT no_bench)
    foreach(build IN LISTS WB_BUILDS)
      add_executable(bench_${id}_${build} "${PROJECT_SOURCE_DIR}/${dir}/${bench_file}")
      target_link_libraries(bench_${id}_${build} PRIVATE ch${id}_${build} wb::cli11)
      set_target_properties(bench_${id}_${build} PROPERTIES
        RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    endforeach()
  endif()

  # Known-wrong versions: each must be caught, with the rule it broke named.
  string(JSON fixtures_json ERROR_VARIABLE no_fixtures GET "${j}" fixtures)
  if(no_fixtures OR NOT "solution" IN_LIST WB_BUILDS)
    return()
  endif()
  string(JSON nfix LENGTH "${fixtures_json}")
  if(nfix EQUAL 0)
    return()
  endif()
  math(EXPR last_fix "${nfix} - 1")
  foreach(i RANGE ${last_fix})
    string(JSON fx GET "${fixtures_json}" ${i})
    string(JSON name GET "${fx}" name)
    string(JSON test_file GET "${fx}" test)
    string(JSON expect GET "${fx}" expect)
    string(JSON replaces GET "${fx}" replaces)
    # Sources: the solution's editable files, with the fixture swapped in for one of them.
    set(sources "")
    foreach(f IN LISTS editable)
      string(JSON swapped ERROR_VARIABLE not_swapped GET "${replaces}" "${f}")
      if(not_swapped)
        list(APPEND sources "${PROJECT_SOURCE_DIR}/solutions/${slug}/${f}")
      else()
        list(APPEND sources "${PROJECT_SOURCE_DIR}/${dir}/${swapped}")
      endif()
    endforeach()
    set(lib ch${id}_fixture_${name})
    add_library(${lib} STATIC ${sources} ${support})
    target_include_directories(${lib} PUBLIC "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                             "${PROJECT_SOURCE_DIR}/${dir}")
    target_link_libraries(${lib} PUBLIC wb::lib)
    target_compile_definitions(${lib} PUBLIC WB_BUILD_NAME="fixture" WB_CHAPTER_ID="${id}")
    set(target test_${id}_fixture_${name})
    string(MAKE_C_IDENTIFIER "ch${id}_obj_${test_file}" obj)
    _wb_test_objects(${obj} "${PROJECT_SOURCE_DIR}/${dir}/${test_file}" ${slug} ${dir})
    _wb_add_test_binary(${target} ${obj} ${lib})
    add_test(NAME ${id}.fixture.${name} COMMAND ${target})
    set_tests_properties(${id}.fixture.${name} PROPERTIES
      LABELS "ch${id};gpu;fixture;solution"
      PASS_REGULAR_EXPRESSION "${expect}"
      SKIP_REGULAR_EXPRESSION "skipped: no CUDA device"
      TIMEOUT 600
      RESOURCE_LOCK gpu)
  endforeach()
endfunction()

# wb_add_host_test(name source... [LIBS lib...] [LABELS label...]): a doctest binary of
# host-side tests, registered as host.<name> with labels cpu;host plus LABELS.
function(wb_add_host_test name)
  cmake_parse_arguments(arg "" "" "LIBS;LABELS" ${ARGN})
  add_executable(test_host_${name} ${arg_UNPARSED_ARGUMENTS})
  target_link_libraries(test_host_${name} PRIVATE wb::test_main ${arg_LIBS})
  set_target_properties(test_host_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  add_test(NAME host.${name} COMMAND test_host_${name})
  set_tests_properties(host.${name} PROPERTIES LABELS "cpu;host;${arg_LABELS}" TIMEOUT 600
                       SKIP_RETURN_CODE 77)
endfunction()
