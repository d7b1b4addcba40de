# wb_add_chapter(tests/NN_slug): builds one chapter from its manifest, tests/NN_slug/chapter.json.
#
# For every build in WB_BUILDS (solution, student) it makes
#   - a static library  ch<NN>_<build>  from the chapter's editable files, taken from
#     solutions/<slug>/ or ${WB_STUDENT_ROOT}/<slug>/, compiled against the pristine API
#     header(s) in chapters/<slug>/ (so an edited header in a submission is never used);
#   - one test executable per entry in "tests":  test_<NN>_<kind>_<build>
#     registered with CTest as  <NN>.<kind>.<build>  with labels
#     ch<NN>;<gpu|cpu>;<kind>;<build>  and SKIP_RETURN_CODE 77.
# A chapter with a directory solutions/<slug>/fast/ also gets the build "fast" (whenever
# WB_BUILDS has solution or fast): the record-speed variant kept beside the readable reference,
# each editable file taken from fast/ where present and from solutions/<slug>/ otherwise;
# library ch<NN>_fast, tests <NN>.<kind>.fast (label fast), bench_<NN>_fast. It runs every
# test the solution runs.
# Each entry of "wrong" (known-wrong versions of an editable file, kept under
# tests/<slug>/wrong/) is built against one test and registered as  <NN>.wrong.<name>: it
# passes when the test binary's output matches its "expect" regular expression, i.e. when
# the tests catch that mistake and name the rule it broke. Each entry of "variants" (other
# correct designs, tests/<slug>/variants/) runs every test as <NN>.variant.<name>.<kind>
# and must pass.

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
# library) and linked against each build: solution, student, every wrong version and every variant.
function(_wb_test_objects obj source slug dir)
  if(NOT TARGET ${obj})
    add_library(${obj} OBJECT ${source})
    target_include_directories(${obj} PRIVATE "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                              "${PROJECT_SOURCE_DIR}/${dir}")
    target_link_libraries(${obj} PRIVATE wb::lib wb::doctest)
  endif()
endfunction()

# How a GPU test shares the GPU under `ctest -j`. A timing test runs alone (RUN_SERIAL): another
# process's kernels would be time-sliced into its measurement. So does every test of a chapter
# whose manifest says "gpu_serial": true (chapter 00's correctness tests time known kernels).
# Correctness tests of other chapters run side by side: nothing they check depends on time, and
# each one checks its free device memory before a large case (a 2^31-element case needs ~19 GB,
# so `ctest -j4` wants a GPU with ~80 GB; on a smaller one run -j1 or `./workbook check`).
function(_wb_gpu_sharing test_name manifest test_file)
  string(JSON serial ERROR_VARIABLE no_serial GET "${manifest}" gpu_serial)
  if(test_file STREQUAL "test_timing.cu" OR (NOT no_serial AND serial))
    set_tests_properties(${test_name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

function(_wb_add_test_binary target obj chapter_lib)
  add_executable(${target} $<TARGET_OBJECTS:${obj}>)
  target_link_libraries(${target} PRIVATE ${chapter_lib} wb::test_main)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# A wrong version kept as its mistake alone: a .patch against the reference file. The patched
# file is made at build time, so it follows the reference as the reference changes, and a
# patch that no longer applies stops the build. git apply is the patch tool (a checkout has
# git); GIT_CEILING_DIRECTORIES keeps it from taking the build tree for part of the
# repository, so it patches the copy in front of it. The copy is patched in a staging
# directory, so a failed apply leaves no output that looks up to date.
function(_wb_patched_source out_var original patch_file tag)
  if(NOT GIT_EXECUTABLE)
    message(FATAL_ERROR "workbook: ${patch_file} is a patch; applying it needs git, which was not found")
  endif()
  get_filename_component(file_name "${original}" NAME)
  set(work "${CMAKE_CURRENT_BINARY_DIR}/patched/${tag}")
  file(MAKE_DIRECTORY "${work}/stage")
  add_custom_command(
    OUTPUT "${work}/${file_name}"
    COMMAND ${CMAKE_COMMAND} -E copy "${original}" "${work}/stage/${file_name}"
    COMMAND ${CMAKE_COMMAND} -E env "GIT_CEILING_DIRECTORIES=${work}" ${GIT_EXECUTABLE} apply "${patch_file}"
    COMMAND ${CMAKE_COMMAND} -E copy "${work}/stage/${file_name}" "${work}/${file_name}"
    WORKING_DIRECTORY "${work}/stage"
    DEPENDS "${original}" "${patch_file}"
    COMMENT "workbook: ${tag}: the reference ${file_name} with ${patch_file}"
    VERBATIM)
  set(${out_var} "${work}/${file_name}" PARENT_SCOPE)
endfunction()

# The solution with some editable files swapped for other versions kept under tests/<slug>/:
#   "wrong":    [{"name", "replaces": {file: path}, "test": file, "expect": regex, "alone": bool}]
#               (a path ending in .patch is a patch against the reference file; "alone": caught
#               only by a case that needs most of the GPU's memory, so it runs with no test beside it)
#               CTest <NN>.wrong.<name> passes when the test's output matches "expect" (the
#               tests caught the mistake and named the rule it broke);
#   "variants": [{"name", "replaces": {file: path}}]
#               CTest <NN>.variant.<name>.<kind> runs every test of the chapter; a correct
#               design other than the reference's must pass them all.
function(_wb_add_swapped_builds key j id slug dir editable support)
  string(JSON entries ERROR_VARIABLE missing GET "${j}" ${key})
  if(missing)
    return()
  endif()
  string(JSON n LENGTH "${entries}")
  if(n EQUAL 0)
    return()
  endif()
  string(JSON tests_json GET "${j}" tests)
  string(JSON ntests LENGTH "${tests_json}")
  math(EXPR last_test "${ntests} - 1")
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON fx GET "${entries}" ${i})
    string(JSON name GET "${fx}" name)
    string(JSON replaces GET "${fx}" replaces)
    set(sources "")
    foreach(f IN LISTS editable)
      string(JSON swapped ERROR_VARIABLE not_swapped GET "${replaces}" "${f}")
      if(not_swapped)
        list(APPEND sources "${PROJECT_SOURCE_DIR}/solutions/${slug}/${f}")
      elseif(swapped MATCHES "\\.patch$")
        _wb_patched_source(patched "${PROJECT_SOURCE_DIR}/solutions/${slug}/${f}"
                           "${PROJECT_SOURCE_DIR}/${dir}/${swapped}" "${id}_${key}_${name}")
        list(APPEND sources "${patched}")
      else()
        list(APPEND sources "${PROJECT_SOURCE_DIR}/${dir}/${swapped}")
      endif()
    endforeach()
    if(key STREQUAL "wrong")
      set(kindname wrong)
    else()
      set(kindname variant)
    endif()
    set(lib ch${id}_${kindname}_${name})
    add_library(${lib} STATIC ${sources} ${support})
    target_include_directories(${lib} PUBLIC "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                             "${PROJECT_SOURCE_DIR}/${dir}")
    target_link_libraries(${lib} PUBLIC wb::lib)
    target_compile_definitions(${lib} PUBLIC WB_BUILD_NAME="${kindname}" WB_CHAPTER_ID="${id}")
    if(key STREQUAL "wrong")
      string(JSON test_file GET "${fx}" test)
      string(JSON expect GET "${fx}" expect)
      set(target test_${id}_wrong_${name})
      string(MAKE_C_IDENTIFIER "ch${id}_obj_${test_file}" obj)
      _wb_test_objects(${obj} "${PROJECT_SOURCE_DIR}/${dir}/${test_file}" ${slug} ${dir})
      _wb_add_test_binary(${target} ${obj} ${lib})
      add_test(NAME ${id}.wrong.${name} COMMAND ${target})
      set_tests_properties(${id}.wrong.${name} PROPERTIES
        LABELS "ch${id};gpu;wrong;solution"
        PASS_REGULAR_EXPRESSION "${expect}"
        SKIP_REGULAR_EXPRESSION "skipped: no CUDA device"
        TIMEOUT 600)
      _wb_gpu_sharing(${id}.wrong.${name} "${j}" "${test_file}")
      # "alone": true: the mistake shows only in a case that needs most of the GPU's memory
      # (2^31 elements), which skips when tests beside it hold that memory; so it runs alone.
      string(JSON alone ERROR_VARIABLE no_alone GET "${fx}" alone)
      if(NOT no_alone AND alone)
        set_tests_properties(${id}.wrong.${name} PROPERTIES RUN_SERIAL TRUE)
      endif()
    else()
      foreach(t_i RANGE ${last_test})
        string(JSON t GET "${tests_json}" ${t_i})
        string(JSON file GET "${t}" file)
        string(JSON kind GET "${t}" kind)
        set(target test_${id}_variant_${name}_${kind})
        string(MAKE_C_IDENTIFIER "ch${id}_obj_${file}" obj)
        _wb_test_objects(${obj} "${PROJECT_SOURCE_DIR}/${dir}/${file}" ${slug} ${dir})
        _wb_add_test_binary(${target} ${obj} ${lib})
        add_test(NAME ${id}.variant.${name}.${kind} COMMAND ${target})
        set_tests_properties(${id}.variant.${name}.${kind} PROPERTIES
          LABELS "ch${id};gpu;variant;${kind};solution"
          SKIP_RETURN_CODE 77
          TIMEOUT 600)
        _wb_gpu_sharing(${id}.variant.${name}.${kind} "${j}" "${file}")
      endforeach()
    endif()
  endforeach()
endfunction()

# "uses": ["01", ...] (optional): chapters whose REFERENCE this chapter builds on (chapter 08
# runs the whole model on chapter 01's matvec, 04's softmax, 06's norm and 07's sampler), so a
# student who has not finished them can still do this chapter. Every library and test object of
# the chapter links ch<NN>_reference (made once, from solutions/<slug of NN>/ and NN's support
# files) and sees NN's API header directory. "model": true links the model engine, wb::model.
function(_wb_reference_library id out_lib)
  set(lib ch${id}_reference)
  set(${out_lib} ${lib} PARENT_SCOPE)
  if(TARGET ${lib})
    return()
  endif()
  file(GLOB found "${PROJECT_SOURCE_DIR}/tests/${id}_*/chapter.json")
  if(NOT found)
    message(FATAL_ERROR "workbook: a chapter uses chapter ${id}, which has no tests/${id}_*/chapter.json")
  endif()
  list(GET found 0 manifest)
  file(READ "${manifest}" j)
  string(JSON slug GET "${j}" slug)
  string(JSON editable_json GET "${j}" editable)
  _wb_json_list(editable "${editable_json}")
  set(sources "")
  foreach(f IN LISTS editable)
    list(APPEND sources "${PROJECT_SOURCE_DIR}/solutions/${slug}/${f}")
  endforeach()
  string(JSON support_json ERROR_VARIABLE no_support GET "${j}" support)
  if(NOT no_support)
    _wb_json_list(support "${support_json}")
    foreach(f IN LISTS support)
      list(APPEND sources "${PROJECT_SOURCE_DIR}/tests/${slug}/${f}")
    endforeach()
  endif()
  add_library(${lib} STATIC ${sources})
  target_include_directories(${lib} PUBLIC "${PROJECT_SOURCE_DIR}/chapters/${slug}"
                                    PRIVATE "${PROJECT_SOURCE_DIR}/tests/${slug}")
  target_link_libraries(${lib} PUBLIC wb::lib)
  if(TARGET wb::model)
    target_link_libraries(${lib} PUBLIC wb::model)  # chapters 01-03's support code uses it
  endif()
  target_compile_definitions(${lib} PRIVATE WB_BUILD_NAME="solution" WB_CHAPTER_ID="${id}")
endfunction()

function(_wb_apply_uses id j)
  string(JSON uses_json ERROR_VARIABLE no_uses GET "${j}" uses)
  string(JSON model ERROR_VARIABLE no_model GET "${j}" model)
  if(no_uses AND (no_model OR NOT model))
    return()
  endif()
  set(libs "")
  if(NOT no_uses)
    _wb_json_list(uses "${uses_json}")
    foreach(used IN LISTS uses)
      _wb_reference_library(${used} ref)
      list(APPEND libs ${ref})
    endforeach()
  endif()
  if(NOT no_model AND model)
    list(APPEND libs wb::model)
  endif()
  get_property(targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    if(t MATCHES "^ch${id}_(solution|student|fast|wrong_.*|variant_.*)$")
      target_link_libraries(${t} PUBLIC ${libs})
    elseif(t MATCHES "^ch${id}_obj_")
      target_link_libraries(${t} PRIVATE ${libs})
    endif()
  endforeach()
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

  # The builds of this chapter: WB_BUILDS, plus "fast" where the chapter has a fast variant.
  set(builds ${WB_BUILDS})
  list(REMOVE_ITEM builds fast)
  set(fast_root "${PROJECT_SOURCE_DIR}/solutions/${slug}/fast")
  if(IS_DIRECTORY "${PROJECT_SOURCE_DIR}/solutions/${slug}")
    # Adding or removing fast/ changes this directory: reconfigure then.
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/solutions/${slug}")
  endif()
  if(IS_DIRECTORY "${fast_root}" AND ("solution" IN_LIST WB_BUILDS OR "fast" IN_LIST WB_BUILDS))
    list(APPEND builds fast)
  endif()

  foreach(build IN LISTS builds)
    if(build STREQUAL "student")
      set(src_root "${WB_STUDENT_ROOT}/${slug}")
    else()
      set(src_root "${PROJECT_SOURCE_DIR}/solutions/${slug}")
    endif()
    set(sources "")
    foreach(f IN LISTS editable)
      if(build STREQUAL "fast" AND EXISTS "${fast_root}/${f}")
        list(APPEND sources "${fast_root}/${f}")  # the fast variant of this file
      else()
        list(APPEND sources "${src_root}/${f}")
      endif()
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
        TIMEOUT ${timeout})
      if(gpu)
        _wb_gpu_sharing(${id}.${kind}.${build} "${j}" "${file}")
      endif()
    endforeach()
  endforeach()

  # The chapter's bench program (its own main): bench_<NN>_<build>.
  string(JSON bench_file ERROR_VARIABLE no_bench GET "${j}" bench)
  if(NOT no_bench)
    foreach(build IN LISTS builds)
      add_executable(bench_${id}_${build} "${PROJECT_SOURCE_DIR}/${dir}/${bench_file}")
      target_link_libraries(bench_${id}_${build} PRIVATE ch${id}_${build} wb::cli11)
      set_target_properties(bench_${id}_${build} PROPERTIES
        RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    endforeach()
  endif()

  # Known-wrong versions ("wrong"): each must be caught, with the rule it broke named.
  # Must-pass variants ("variants"): other correct designs; every test must pass them.
  if("solution" IN_LIST WB_BUILDS)
    _wb_add_swapped_builds(wrong "${j}" ${id} ${slug} ${dir} "${editable}" "${support}")
    _wb_add_swapped_builds(variants "${j}" ${id} ${slug} ${dir} "${editable}" "${support}")
  endif()
  _wb_apply_uses(${id} "${j}")
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
