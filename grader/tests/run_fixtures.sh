#!/usr/bin/env bash
# Grades every known-wrong submission in grader/acceptance (or the ones named) and checks each
# report against the fixture's expected.json ("expect"): every one must be graded as wrong,
# for the right reason. On a machine without a GPU the verdicts that need one are reported
# as not checkable here; compile errors, rejections and bad input are checked everywhere.
#
#   grader/tests/run_fixtures.sh WORKBOOK_BINARY OUT_DIR [FIXTURE ...]
#
# WB_FIXTURE_GRADE_ARGS adds options to every `workbook grade` (CTest's grader.acceptance_cpu
# passes --cpu-only: on a GPU machine too, only what needs no GPU is checked).
#
# Exit status: 0 when no fixture failed its expectations.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 WORKBOOK_BINARY OUT_DIR [FIXTURE ...]" >&2
  exit 2
fi
wb=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
fixtures=("$@")
if [ ${#fixtures[@]} -eq 0 ]; then
  for d in "$repo"/grader/acceptance/*/; do fixtures+=("$(basename "$d")"); done
fi
mkdir -p "$out/logs" "$out/submissions" "$out/results"
rm -rf /tmp/wb-grader-fixture-evil "$out/wb-grader-fixture-evil.cu"

passed=0 partial=0 failed=0
failures=()
for name in "${fixtures[@]}"; do
  dir="$repo/grader/acceptance/$name"
  log="$out/logs/$name.log"
  if ! composed=$(python3 "$repo/grader/tests/compose_fixture.py" "$dir" "$repo" "$out/submissions/$name" 2>"$log"); then
    echo "FAIL    $name: the fixture could not be composed ($(tail -1 "$log"))"
    failed=$((failed + 1)); failures+=("$name"); continue
  fi
  sub=$(sed -n 1p <<<"$composed")
  chapters=$(sed -n 2p <<<"$composed")
  mapfile -t opts < <(python3 -c 'import json,sys; [print(o) for o in json.load(open(sys.argv[1])).get("grade_options", [])]' "$dir/expected.json")
  args=(grade "$sub" --out "$out/results/$name" --work-dir "$out/work" --student "$name" --expect "$dir/expected.json" "${opts[@]}")
  [ -n "$chapters" ] && args+=(--chapters "$chapters")
  read -r -a extra <<<"${WB_FIXTURE_GRADE_ARGS:-}"
  args+=("${extra[@]}")
  start=$(date +%s)
  "$wb" "${args[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ] && grep -q "expectation not checkable here" "$log"; then
    echo "PARTLY  $name (${secs}s): $(grep -c 'expectation not checkable here' "$log") expectation(s) need a GPU"
    partial=$((partial + 1))
  elif [ $rc -eq 0 ]; then
    echo "PASS    $name (${secs}s)"
    passed=$((passed + 1))
  else
    echo "FAIL    $name (${secs}s, exit $rc):"
    grep -E "EXPECTATION NOT MET|internal error|workbook grade:" "$log" | sed 's/^/          /' | head -8
    failed=$((failed + 1)); failures+=("$name")
  fi
done

# Hostile archives must not have written anything outside --out.
for p in /tmp/wb-grader-fixture-evil "$out/wb-grader-fixture-evil.cu" "$out/submissions/wb-grader-fixture-evil.cu"; do
  if [ -e "$p" ]; then
    echo "FAIL    a hostile archive wrote $p"
    failed=$((failed + 1)); failures+=("escape:$p")
  fi
done

echo
echo "fixtures: $passed passed, $partial passed the checks possible here (the rest need a GPU), $failed failed"
[ $failed -eq 0 ] || { echo "failed: ${failures[*]}"; exit 1; }
