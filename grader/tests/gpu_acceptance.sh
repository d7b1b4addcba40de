#!/usr/bin/env bash
# Acceptance of the grader on a GPU machine (an H200 for the record; it runs anywhere, and
# on a machine without a GPU every GPU verdict is reported as not checkable here).
#
#   grader/tests/gpu_acceptance.sh [STAGE ...]        (default: every stage, in order)
#
# Stages (each fits in a few minutes on one H200; run them one per call where calls are
# time-limited; state is kept in $WB_ACCEPT_DIR between calls):
#   build           configure and build the CLI and the grader's host tests
#   host            the grader's host tests (no GPU needed)
#   reference[:C]   grade solutions/ (chapters C, e.g. reference:04,05): full marks expected
#   starters        grade chapters/ (the starters): every chapter "to do", 0 points, no crash
#   fixtures[:GLOB] grade every known-wrong submission in grader/acceptance (or those matching
#                   GLOB, e.g. 'fixtures:04-cheat-*'): each wrong, for the right reason
#   roster          grade-all over a roster of 12 submissions (good, partial, broken,
#                   hostile, invalid), uninterrupted: the baseline gradebook
#   resume          grade-all over the same roster into a new --out, killed with SIGKILL
#                   after 3 students, then rerun: its gradebook must equal the baseline's
#                   (different hidden seeds too: correctness scores must not depend on them)
#   repeat          grade one submission twice (two seeds): the same correctness scores
#   sanitize        grade chapter 04 of the reference and the illegal-address fixture with
#                   --sanitize (compute-sanitizer memcheck and racecheck)
#
# Where a call is limited to 10 minutes, run the stages one per call, and the fixtures in
# groups: 'fixtures:04-cheat-*', 'fixtures:04-fault-*', 'fixtures:04-mistake-*',
# 'fixtures:0[01235]-*', 'fixtures:all-*', 'fixtures:input-*'; the reference by chapters if
# needed (reference:00,04,05 then reference:01,02,03). roster and resume take about the same
# time each (several minutes on one GPU; a machine with 2 GPUs halves it).
#
# Environment: OUT (where logs and reports are copied for the caller), WB_ACCEPT_DIR
# (state; default <repo>/build-acceptance), WB_ROSTER_CHAPTERS (chapters the roster grades;
# default 04,05), JOBS (build parallelism).
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
S=${WB_ACCEPT_DIR:-$repo/build-acceptance}
B=$S/build
WB=$B/bin/workbook
ROSTER_CHAPTERS=${WB_ROSTER_CHAPTERS:-04,05}
mkdir -p "$S"
SUMMARY=$S/summary.txt
status=0
NOTE=""

say() { echo "[$(date +%H:%M:%S)] $*"; }
record() {  # stage verdict details
  printf '%-22s %-5s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"
  [ "$2" = "PASS" ] || status=1
}
export_out() {  # copy a directory's reports/logs (not builds) to $OUT
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT/$2"
  (cd "$1" && find . -path '*/.work' -prune -o -path './work' -prune -o -type f \
     \( -name '*.json' -o -name '*.md' -o -name '*.xml' -o -name '*.csv' -o -name '*.log' -o -name '*.txt' \) \
     -size -2M -print | while read -r f; do mkdir -p "$OUT/$2/$(dirname "$f")"; cp "$f" "$OUT/$2/$f"; done)
}
need_build() {
  [ -x "$WB" ] || { echo "run the build stage first ($WB is missing)"; exit 2; }
}
expect_file() {  # writes an expectations file from JSON text
  echo "$2" >"$1"
}

stage_build() {
  say "build: configuring $B"
  local t0=$SECONDS
  cmake -S "$repo" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$S/configure.log" 2>&1 ||
    { record build FAIL "configure failed: $(tail -3 "$S/configure.log")"; return; }
  cmake --build "$B" --target workbook test_host_grader grader_test_helper --parallel "${JOBS:-$(nproc)}" \
    >"$S/build.log" 2>&1 || { record build FAIL "build failed: $(grep -m3 error "$S/build.log")"; return; }
  record build PASS "$((SECONDS - t0)) s; CUDA architectures $(grep CMAKE_CUDA_ARCHITECTURES: "$B/CMakeCache.txt" | cut -d= -f2)"
}

stage_host() {
  need_build
  local t0=$SECONDS
  if "$B/bin/test_host_grader" >"$S/host.log" 2>&1; then
    record host PASS "$(grep 'test cases' "$S/host.log" | tail -1 | sed 's/.*test cases://') ($((SECONDS - t0)) s)"
  else
    record host FAIL "$(grep -m5 ERROR "$S/host.log")"
  fi
  [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$S/host.log" "$OUT/host.log"
}

# grade SUBMISSION NAME EXPECTATIONS [grade options...]
grade_expect() {
  local sub=$1 name=$2 expect=$3
  shift 3
  local out=$S/grades/$name
  rm -rf "$out"
  "$WB" grade "$sub" --out "$out" --work-dir "$S/work" --student "$name" --expect "$expect" "$@" >"$S/grades/$name.log" 2>&1
  local rc=$?
  cat "$S/grades/$name.log"
  grep -q "not checkable here" "$S/grades/$name.log" && NOTE=" (GPU verdicts not checkable on this machine)" || NOTE=""
  export_out "$out" "grades/$name"
  [ -n "${OUT:-}" ] && cp "$S/grades/$name.log" "$OUT/grades/$name.log"
  return $rc
}

stage_reference() {
  need_build
  local chapters=${1:-}
  mkdir -p "$S/grades"
  local t0=$SECONDS
  expect_file "$S/expect-reference.json" '{"status": ["graded", "incomplete"], "full_marks": true, "chapters": {"*": {"state": ["passing_timing", "not_gradable"]}}}'
  local args=()
  [ -n "$chapters" ] && args=(--chapters "$chapters")
  if grade_expect "$repo/solutions" "reference${chapters:+-${chapters//,/-}}" "$S/expect-reference.json" "${args[@]}"; then
    record "reference${chapters:+:$chapters}" PASS "full marks$NOTE ($((SECONDS - t0)) s)"
  else
    record "reference${chapters:+:$chapters}" FAIL "see $S/grades/reference*.log"
  fi
}

stage_starters() {
  need_build
  mkdir -p "$S/grades"
  local t0=$SECONDS
  expect_file "$S/expect-starters.json" '{"status": ["graded", "incomplete"], "chapters": {"*": {"state": ["todo", "not_gradable"], "max_score": 0}}}'
  if grade_expect "$repo/chapters" starters "$S/expect-starters.json"; then
    record starters PASS "every chapter to do, 0 points$NOTE ($((SECONDS - t0)) s)"
  else
    record starters FAIL "see $S/grades/starters.log"
  fi
}

stage_fixtures() {
  need_build
  local glob=${1:-*} names=()
  for d in "$repo"/grader/acceptance/$glob/; do [ -d "$d" ] && names+=("$(basename "$d")"); done
  local t0=$SECONDS
  "$repo/grader/tests/run_fixtures.sh" "$WB" "$S/fixtures" "${names[@]}" | tee "$S/fixtures-${glob//\*/all}.txt"
  local rc=${PIPESTATUS[0]}
  export_out "$S/fixtures/results" "fixtures/results"
  export_out "$S/fixtures/logs" "fixtures/logs"
  [ -n "${OUT:-}" ] && cp "$S/fixtures-${glob//\*/all}.txt" "$OUT/"
  local line
  line=$(grep '^fixtures:' "$S/fixtures-${glob//\*/all}.txt" | tail -1)
  if [ "$rc" -eq 0 ]; then record "fixtures:$glob" PASS "$line ($((SECONDS - t0)) s)"
  else record "fixtures:$glob" FAIL "$(tail -1 "$S/fixtures-${glob//\*/all}.txt")"; fi
}

make_roster() {
  local r=$S/roster
  [ -f "$r/.complete" ] && return 0
  rm -rf "$r" "$S/roster-src"
  mkdir -p "$r" "$S/roster-src"
  compose() {  # fixture student
    local sub
    sub=$(python3 "$repo/grader/tests/compose_fixture.py" "$repo/grader/acceptance/$1" "$repo" "$S/roster-src/$2" | head -1)
    case "$sub" in
      *.tar.gz) mv "$sub" "$r/$2.tar.gz" ;;
      *.zip) mv "$sub" "$r/$2.zip" ;;
      *-does-not-exist) : ;;
      *) mv "$sub" "$r/$2" ;;
    esac
  }
  cp -r "$repo/solutions" "$r/alice"                      # good: every reference solution
  compose input-zip-wrapped bob                            # good: a zip of a workbook copy (04, 05)
  cp -r "$repo/chapters" "$r/carol"                        # nothing done: the starters
  mkdir -p "$S/roster-src/dave/chapters"                   # partial: 05 done, 04 half done
  cp -r "$repo/solutions/05_fused_gelu" "$S/roster-src/dave/chapters/"
  python3 "$repo/grader/tests/compose_fixture.py" "$repo/grader/acceptance/04-mistake-unfused-only" "$repo" "$S/roster-src/dave-04" >/dev/null
  cp -r "$S/roster-src/dave-04/04_fused_softmax" "$S/roster-src/dave/chapters/"
  (cd "$S/roster-src" && tar czf "$r/dave.tar.gz" dave)
  compose 04-fault-compile-error erin                      # broken: does not compile
  compose 04-fault-hang frank                              # broken: hangs
  compose 04-fault-crash gina                              # broken: crashes
  compose 04-cheat-cpu hank                                # hostile: the work on the CPU
  compose 04-cheat-forge-report ivy                        # hostile: forges the report
  compose input-absolute-path jack                         # hostile: an archive escaping
  mkdir -p "$r/kate"                                       # invalid: empty
  compose 04-mistake-no-max leo                            # ordinary mistake
  compose 04-cheat-edit-tests mia                          # hostile: edited the tests
  touch "$r/.complete"
}

roster_rubric() {
  # The shipped rubric with a shorter correctness time limit, so the hanging submission
  # costs one minute rather than five.
  python3 - "$repo/data/rubric.json" "$S/roster-rubric.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r.setdefault("defaults", {}).setdefault("timeout_s", {})["correctness"] = 60
json.dump(r, open(sys.argv[2], "w"), indent=2)
PY
}

stage_roster() {
  need_build
  make_roster
  roster_rubric
  local out=$S/roster-a t0=$SECONDS
  rm -rf "$out"
  say "roster: grade-all over $(ls "$S/roster" | wc -l) submissions, chapters $ROSTER_CHAPTERS"
  "$WB" grade-all "$S/roster" --out "$out" --work-dir "$S/roster-work" --rubric "$S/roster-rubric.json" \
    --chapters "$ROSTER_CHAPTERS" 2>&1 | tee "$S/roster-a.log"
  local rc=${PIPESTATUS[0]}
  export_out "$out" roster-a
  [ -n "${OUT:-}" ] && cp "$S/roster-a.log" "$OUT/"
  local rows
  rows=$(($(wc -l <"$out/gradebook.csv") - 1))
  if [ "$rc" -eq 0 ] && [ "$rows" -ge 10 ] && ! grep -q ',pending,\|,error,' "$out/gradebook.csv"; then
    record roster PASS "$rows students graded unattended ($((SECONDS - t0)) s)"
    cat "$out/gradebook.csv"
  else
    record roster FAIL "exit $rc, $rows rows; see $S/roster-a.log"
  fi
}

stage_resume() {
  need_build
  [ -f "$S/roster-a/gradebook.csv" ] || { echo "run the roster stage first"; exit 2; }
  local out=$S/roster-b t0=$SECONDS
  rm -rf "$out"
  "$WB" grade-all "$S/roster" --out "$out" --work-dir "$S/roster-work" --rubric "$S/roster-rubric.json" \
    --chapters "$ROSTER_CHAPTERS" >"$S/roster-b-killed.log" 2>&1 &
  local pid=$! done_count=0
  while kill -0 "$pid" 2>/dev/null; do
    done_count=$(find "$out/students" -maxdepth 2 -name DONE 2>/dev/null | wc -l)
    [ "$done_count" -ge 3 ] && break
    sleep 1
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  say "resume: killed grade-all (SIGKILL) with $done_count students done"
  # Nothing of the killed run may survive it: its test processes die with it at once, and a
  # compiler it had started finishes its file and exits (allow a minute for that).
  local left=1 waited=0
  while [ $waited -lt 60 ]; do
    left=$(pgrep -f "$S/roster-work/" | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 2
    waited=$((waited + 2))
  done
  local partial
  partial=$(find "$out/students" -maxdepth 1 -name '.tmp-*' | wc -l)
  "$WB" grade-all "$S/roster" --out "$out" --work-dir "$S/roster-work" --rubric "$S/roster-rubric.json" \
    --chapters "$ROSTER_CHAPTERS" 2>&1 | tee "$S/roster-b.log"
  export_out "$out" roster-b
  [ -n "${OUT:-}" ] && cp "$S/roster-b.log" "$S/roster-b-killed.log" "$OUT/"
  if diff "$S/roster-a/gradebook.csv" "$out/gradebook.csv" >"$S/roster-diff.txt" && [ "$left" -eq 0 ]; then
    record resume PASS "killed after $done_count done ($partial half-graded left, redone), $left stray processes; gradebook identical to the baseline ($((SECONDS - t0)) s)"
  else
    record resume FAIL "stray processes: $left; gradebook differences: $(tr '\n' ' ' <"$S/roster-diff.txt" | cut -c1-400)"
  fi
  [ -n "${OUT:-}" ] && cp "$S/roster-diff.txt" "$OUT/" 2>/dev/null
}

stage_repeat() {
  need_build
  mkdir -p "$S/grades"
  local t0=$SECONDS sub=$S/repeat-sub
  rm -rf "$sub"
  python3 "$repo/grader/tests/compose_fixture.py" "$repo/grader/acceptance/04-mistake-no-max" "$repo" "$sub" >/dev/null
  expect_file "$S/expect-any.json" '{}'
  grade_expect "$sub" repeat-1 "$S/expect-any.json" --chapters 04 >/dev/null
  grade_expect "$sub" repeat-2 "$S/expect-any.json" --chapters 04 >/dev/null
  local a b
  a=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print([(c["id"], [(k["kind"], k["score"]) for k in c["kinds"] if k["kind"]=="correctness"]) for c in r["chapters"]], r["seed"])' "$S/grades/repeat-1/report.json")
  b=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print([(c["id"], [(k["kind"], k["score"]) for k in c["kinds"] if k["kind"]=="correctness"]) for c in r["chapters"]], r["seed"])' "$S/grades/repeat-2/report.json")
  if [ "${a% *}" = "${b% *}" ]; then record repeat PASS "correctness ${a% *} with seeds ${a##* } and ${b##* } ($((SECONDS - t0)) s)"
  else record repeat FAIL "first $a, second $b"; fi
}

stage_sanitize() {
  need_build
  mkdir -p "$S/grades"
  local t0=$SECONDS sub=$S/sanitize-sub
  expect_file "$S/expect-any.json" '{}'
  grade_expect "$repo/solutions" sanitize-reference "$S/expect-any.json" --chapters 04 --sanitize >/dev/null
  rm -rf "$sub"
  python3 "$repo/grader/tests/compose_fixture.py" "$repo/grader/acceptance/04-fault-illegal-address" "$repo" "$sub" >/dev/null
  grade_expect "$sub" sanitize-illegal "$S/expect-any.json" --chapters 04 --sanitize >/dev/null
  local ok err
  ok=$(python3 -c 'import json,sys; print(sum(s["errors"] for c in json.load(open(sys.argv[1]))["chapters"] for s in c["sanitizer"]), [(s["tool"], s["ran"], s["problem"]) for c in json.load(open(sys.argv[1]))["chapters"] for s in c["sanitizer"]])' "$S/grades/sanitize-reference/report.json")
  err=$(python3 -c 'import json,sys; print(sum(s["errors"] for c in json.load(open(sys.argv[1]))["chapters"] for s in c["sanitizer"] if s["tool"]=="memcheck"))' "$S/grades/sanitize-illegal/report.json")
  if [ "${ok%% *}" = "0" ] && [ "$err" -gt 0 ]; then record sanitize PASS "reference: 0 errors; illegal address: $err memcheck error(s) ($((SECONDS - t0)) s)"
  else record sanitize FAIL "reference: $ok; illegal address memcheck errors: $err"; fi
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build host reference starters fixtures roster resume repeat sanitize)
echo "== grader acceptance $(date -u +%FT%TZ) on $(hostname): ${stages[*]}" | tee -a "$SUMMARY"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUMMARY"
for s in "${stages[@]}"; do
  name=${s%%:*}
  arg=""
  [ "$s" != "$name" ] && arg=${s#*:}
  say "stage $s"
  case $name in
    build | host | starters | roster | resume | repeat | sanitize) "stage_$name" ;;
    reference | fixtures) "stage_$name" "$arg" ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
echo "== summary (all calls so far, $SUMMARY):"
cat "$SUMMARY"
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$SUMMARY" "$OUT/summary.txt"
exit $status
