# Host test of `workbook check`'s grading checks (CTest grader.check_rejects): chapter 04 with
# a softmax_fused.cu that defines the tests' own checker (the acceptance fixture
# 04-cheat-replace-checker) is reported as rejected, with the reason, exactly as `workbook
# grade` would reject it; the reference file in its place is not. Run as
#   cmake -DWORKBOOK=<workbook> -DSOURCE=<repo> -DWORK=<scratch> -DCUDA_ARCHS=<archs> -P check_rejects.cmake
set(root ${WORK}/root/04_fused_softmax)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${root})
file(COPY ${SOURCE}/solutions/04_fused_softmax/softmax_unfused.cu DESTINATION ${root})
file(COPY ${SOURCE}/grader/acceptance/04-cheat-replace-checker/softmax_fused.cu DESTINATION ${root})

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
                        -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS} -DWB_STUDENT_ROOT=${WORK}/root
                        -DWB_CHAPTERS=04 -DWB_BUILDS=student
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_rejects: the student build did not configure:\n${out}")
endif()

function(run_check)  # sets rc and out
  execute_process(COMMAND ${WORKBOOK} check 04 --build-dir ${WORK}/build
                  RESULT_VARIABLE code OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(rc ${code} PARENT_SCOPE)
  set(out "${o}${e}" PARENT_SCOPE)
endfunction()

run_check()
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

file(COPY ${SOURCE}/solutions/04_fused_softmax/softmax_fused.cu DESTINATION ${root})
file(TOUCH ${root}/softmax_fused.cu)  # file(COPY) keeps the old time stamp: an edit would not
run_check()
string(FIND "${out}" "rejected" at)
if(NOT at EQUAL -1 OR NOT (rc EQUAL 0 OR rc EQUAL 77))
  message(SEND_ERROR "check_rejects: the reference must not be rejected (exit 0 or 77, got ${rc})\n${out}")
endif()
