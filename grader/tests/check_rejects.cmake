# Host test of `workbook check`'s grading checks (CTest grader.check_rejects): chapter 04 with
# a softmax_fused.cu that defines the tests' own checker (the acceptance fixture
# 04-cheat-replace-checker) is reported as rejected, with the reason, exactly as `workbook
# grade` would reject it; the reference file in its place is not. Run as
#   cmake -DWORKBOOK=<workbook> -DSOURCE=<repo> -DWORK=<scratch> -DCUDA_ARCHS=<archs> -P check_rejects.cmake
# Two student roots, one per case: each check configures the build for its own root, so the
# second build recompiles from other paths and never depends on file time stamps (a copy made
# in the same second as the first build's object would look up to date to ninja).
file(REMOVE_RECURSE ${WORK})
foreach(case IN ITEMS cheat reference)
  file(MAKE_DIRECTORY ${WORK}/${case}/04_fused_softmax)
  file(COPY ${SOURCE}/solutions/04_fused_softmax/softmax_unfused.cu DESTINATION ${WORK}/${case}/04_fused_softmax)
endforeach()
file(COPY ${SOURCE}/grader/acceptance/04-cheat-replace-checker/softmax_fused.cu
     DESTINATION ${WORK}/cheat/04_fused_softmax)
file(COPY ${SOURCE}/solutions/04_fused_softmax/softmax_fused.cu DESTINATION ${WORK}/reference/04_fused_softmax)

function(run_check case)  # configures the student build for ${WORK}/${case}, checks; sets rc and out
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                          -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS} -DWB_STUDENT_ROOT=${WORK}/${case}
                          -DWB_CHAPTERS=04 -DWB_BUILDS=student
                  RESULT_VARIABLE code OUTPUT_VARIABLE o ERROR_VARIABLE o)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "check_rejects: the student build did not configure:\n${o}")
  endif()
  execute_process(COMMAND ${WORKBOOK} check 04 --build-dir ${WORK}/build
                  RESULT_VARIABLE code OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(rc ${code} PARENT_SCOPE)
  set(out "${o}${e}" PARENT_SCOPE)
endfunction()

run_check(cheat)
foreach(text IN ITEMS "rejected" "softmax_fused.cu defines" "ch04::reference::check_softmax"
                      "`workbook grade` rejects this chapter")
  string(FIND "${out}" "${text}" at)
  if(at EQUAL -1)
    message(SEND_ERROR "check_rejects: the cheat's check must say '${text}'\n--- output ---\n${out}")
  endif()
endforeach()
if(NOT rc EQUAL 1)
  message(SEND_ERROR "check_rejects: a rejected chapter must fail the check (exit 1, got ${rc})\n${out}")
endif()

run_check(reference)
string(FIND "${out}" "rejected" at)
if(NOT at EQUAL -1 OR NOT (rc EQUAL 0 OR rc EQUAL 77))
  message(SEND_ERROR "check_rejects: the reference must not be rejected (exit 0 or 77, got ${rc})\n${out}")
endif()
