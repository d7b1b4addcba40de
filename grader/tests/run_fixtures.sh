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
# WB_FIXTURE_JOBS=N grades up to N fixtures side by side, those whose verdict needs no quiet
# GPU (see needs_quiet_gpu); the others still run one at a time. Default 1.
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

# Grades one fixture with WORK_DIR as the grader's build tree (reused, so later fixtures
# compile only what changed) and prints one verdict line (PASS, PARTLY or FAIL) and its details.
grade_fixture() {
  local name=$1 work=$2
  local dir="$repo/grader/acceptance/$name"
  local log="$out/logs/$name.log"
  local composed sub chapters opts extra rc start secs args
  if ! composed=$(python3 "$repo/grader/tests/compose_fixture.py" "$dir" "$repo" "$out/submissions/$name" 2>"$log"); then
    echo "FAIL    $name: the fixture could not be composed ($(tail -1 "$log"))"
    return
  fi
  sub=$(sed -n 1p <<<"$composed")
  chapters=$(sed -n 2p <<<"$composed")
  mapfile -t opts < <(python3 -c 'import json,sys; [print(o) for o in json.load(open(sys.argv[1])).get("grade_options", [])]' "$dir/expected.json")
  args=(grade "$sub" --out "$out/results/$name" --work-dir "$work" --student "$name" --expect "$dir/expected.json" "${opts[@]}")
  [ -n "$chapters" ] && args+=(--chapters "$chapters")
  read -r -a extra <<<"${WB_FIXTURE_GRADE_ARGS:-}"
  args+=("${extra[@]}")
  start=$(date +%s)
  "$wb" "${args[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ] && grep -q "expectation not checkable here" "$log"; then
    echo "PARTLY  $name (${secs}s): $(grep -c 'expectation not checkable here' "$log") expectation(s) need a GPU"
  elif [ $rc -eq 0 ]; then
    echo "PASS    $name (${secs}s)"
  else
    echo "FAIL    $name (${secs}s, exit $rc):"
    grep -E "EXPECTATION NOT MET|internal error|workbook grade:" "$log" | sed 's/^/          /' | head -8
  fi
}

# A fixture whose verdict depends on measured times must have the GPU to itself: one that must
# pass timing (all-references, the variants), one with a score floor, and chapter 00's (its
# correctness tests time known kernels). Another process's kernels, time-sliced into a
# measurement, read as "work escaped the stream" (seen with four graders on one H200). So must
# one whose catching case needs much of the GPU's memory (its expected.json says "alone": why):
# beside other graders that case skips, and the mistake passes.
needs_quiet_gpu() {
  local dir="$repo/grader/acceptance/$1"
  [[ $1 == 00-* || $1 == all-* ]] || grep -qE '"(passing_timing|min_score|full_marks|alone)"' "$dir/expected.json"
}

jobs=${WB_FIXTURE_JOBS:-1}
# WB_FIXTURE_GPUS=G (a machine with G GPUs): the shared shards are spread over the GPUs, and the
# fixtures that need a quiet GPU are graded G at a time, one on each GPU. Default 1 (the GPU
# the environment gives).
gpus=${WB_FIXTURE_GPUS:-1}
shared=() quiet=()
for name in "${fixtures[@]}"; do
  if [ "$jobs" -gt 1 ] && ! needs_quiet_gpu "$name"; then shared+=("$name"); else quiet+=("$name"); fi
done
verdicts="$out/verdicts.txt"
: >"$verdicts"
# Runs the rest of its arguments with CUDA_VISIBLE_DEVICES set to GPU $1 when there are several.
on_gpu() {
  local gpu=$1; shift
  if [ "$gpus" -gt 1 ]; then CUDA_VISIBLE_DEVICES=$gpu "$@"; else "$@"; fi
}
# WB_FIXTURE_JOBS=N: the fixtures that may share a GPU are graded N at a time on each GPU (a
# shard each, with its own build tree); the rest one at a time on each GPU afterwards.
if [ ${#shared[@]} -gt 0 ]; then
  slots=$((jobs * gpus))
  for ((slot = 0; slot < slots; slot++)); do
    (for ((i = slot; i < ${#shared[@]}; i += slots)); do
       on_gpu $((slot % gpus)) grade_fixture "${shared[$i]}" "$out/work$slot"
     done >"$out/shard$slot.txt") &
  done
  wait
  for ((slot = 0; slot < slots; slot++)); do cat "$out/shard$slot.txt"; done | tee -a "$verdicts"
fi
if [ ${#quiet[@]} -gt 0 ]; then
  for ((g = 0; g < gpus; g++)); do
    (for ((i = g; i < ${#quiet[@]}; i += gpus)); do
       on_gpu "$g" grade_fixture "${quiet[$i]}" "$out/work-quiet$g"
     done >"$out/quiet$g.txt") &
  done
  wait
  for ((g = 0; g < gpus; g++)); do cat "$out/quiet$g.txt"; done | tee -a "$verdicts"
fi
passed=$(grep -c '^PASS ' "$verdicts")
partial=$(grep -c '^PARTLY ' "$verdicts")
failed=$(grep -c '^FAIL ' "$verdicts")
mapfile -t failures < <(sed -nE 's/^FAIL +([^ :]+).*/\1/p' "$verdicts")

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
