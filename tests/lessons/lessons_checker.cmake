# Host test of `workbook lessons` (grader/cmd_lessons.cpp): each fixture tree under
# tests/lessons/ is a tiny workbook (chapters/00_x/README.md) checked against the results in
# tests/lessons/good/results/. Run as
#   cmake -DWORKBOOK=<workbook> -DFIXTURES=<tests/lessons> -DWORK=<scratch dir> -P lessons_checker.cmake
#   good        every kind of marker, fact markers, code, shapes and hyphenated units: exit 0
#   units       typed figures in prose: exit 1, each named FILE:LINE with its text
#   stale       a marker whose text differs from the results: exit 1 with --check; the fill
#               rewrites it
#   unresolved  a missing results file and a missing entry: exit 2, each named FILE:LINE
set(results ${FIXTURES}/good/results)

function(run_lessons tree)  # remaining args: extra CLI arguments; sets rc and out
  execute_process(COMMAND ${WORKBOOK} lessons --source ${tree} --results ${results} ${ARGN}
                  RESULT_VARIABLE code OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(rc ${code} PARENT_SCOPE)
  set(out "${o}${e}" PARENT_SCOPE)
endfunction()

function(expect what)  # remaining args: the condition, as if() takes it
  if(NOT (${ARGN}))
    message(SEND_ERROR "lessons checker: ${what}\n--- output ---\n${out}")
  endif()
endfunction()

function(expect_in text)
  string(FIND "${out}" "${text}" at)
  if(at EQUAL -1)
    message(SEND_ERROR "lessons checker: expected output to contain '${text}'\n--- output ---\n${out}")
  endif()
endfunction()

run_lessons(${FIXTURES}/good --check)
expect("the good lesson must pass (exit 0, got ${rc})" rc EQUAL 0)
expect_in("6 measured numbers in the lessons, all match the results files")
string(FIND "${out}" "outside a results marker" at)
expect("the good lesson has no number with a unit outside a marker" at EQUAL -1)

run_lessons(${FIXTURES}/units --check)
expect("typed figures must fail the check (exit 1, got ${rc})" rc EQUAL 1)
foreach(hit IN ITEMS ":3: \"10 GB/s\"" ":3: \"400 times\"" ":3: \"4 TB/s\"" ":4: \"2.8x\""
                     ":4: \"98 %\"" ":4: \"3.5 us\"" ":5: \"9,000 tokens/s\"" ":5: \"438 MB\""
                     ":5: \"1.2e3 ms\"" ":8: \"7 µs\"")
  expect_in("chapters/00_x/README.md${hit} is a number with a unit outside a results marker")
endforeach()
string(FIND "${out}" "5 ms" at)
expect("an indented code block is not prose" at EQUAL -1)
run_lessons(${FIXTURES}/units)
expect("without --check typed figures are warnings (exit 0, got ${rc})" rc EQUAL 0)
expect_in("(warning)")

run_lessons(${FIXTURES}/stale --check)
expect("a stale marker must fail the check (exit 1, got ${rc})" rc EQUAL 1)
expect_in("1 of 1 measured numbers differ")
file(REMOVE_RECURSE ${WORK}/stale)
file(COPY ${FIXTURES}/stale DESTINATION ${WORK})
run_lessons(${WORK}/stale)
expect("the fill must succeed (exit 0, got ${rc})" rc EQUAL 0)
file(READ ${WORK}/stale/chapters/00_x/README.md filled)
string(FIND "${filled}" "-->10.2<!-- /wb --> us." at)
expect("the fill must write the value from the results file" NOT at EQUAL -1)
run_lessons(${WORK}/stale --check)
expect("after the fill the check passes (exit 0, got ${rc})" rc EQUAL 0)

run_lessons(${FIXTURES}/unresolved --check)
expect("unresolved markers exit 2 (got ${rc})" rc EQUAL 2)
expect_in("chapters/00_x/README.md:4: results file")
expect_in("missing-fast.json does not exist")
expect_in("chapters/00_x/README.md:5: r.json has no result matching 'variant=none'")
