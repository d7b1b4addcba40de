#!/usr/bin/env bash
# Host test of .ci/racecheck-excused.awk, the one racecheck report that .ci/sanitize-suites
# excuses (its header says why): on racecheck logs in tests/ci/racecheck/ (ring_only.log is a
# real one from an H200, trimmed; ring_pair_h200.log a whole one, with row_dot_pair's reads of
# the ring; the others are made of their lines), each must come out as
# "OTHER EXCUSED CAPPED". What must never be excused: a race between other accesses, a bulk
# copy's write against any read but the ring's, two bulk copies, errors without a report.
#   tests/ci/racecheck_excused_test.sh [REPO_ROOT]
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
awk_file="$root/.ci/racecheck-excused.awk"
fixtures="$root/tests/ci/racecheck"
status=0
expect() {  # FIXTURE "OTHER EXCUSED CAPPED" WHY
  local got
  got="$(awk -f "$awk_file" "$fixtures/$1")"
  if [ "$got" != "$2" ]; then
    echo "FAIL $1: got '$got', want '$2' ($3)"
    status=1
  else
    echo "ok   $1: $got"
  fi
}
expect ring_only.log "0 4 1" "the ring's races only, and racecheck's hazard cap reached"
expect ring_pair_h200.log "0 39 1" "a whole H200 log (1510514, the bit-identity case): row_dot's and row_dot_pair's reads"
expect ring_read_first.log "0 3 0" "the same races reported from the read's side, row_dot_pair's too"
expect other_race.log "1 2 0" "a race in attention beside the ring's must count"
expect bulk_copy_other_reader.log "1 0 0" "a bulk copy against a read outside the ring must count"
expect bulk_copy_waw.log "1 0 0" "two bulk copies into the same bytes must count"
expect summary_only.log "5 0 0" "errors with no report to classify must count"
expect clean.log "0 0 0" "nothing reported"
exit $status
