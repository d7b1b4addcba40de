# racecheck-excused.awk LOG: the races compute-sanitizer's racecheck reported in LOG (its
# per-race report mode: --racecheck-report analysis, every report printed), classified for
# .ci/sanitize-suites (its header says why). Prints "OTHER EXCUSED CAPPED":
#   EXCUSED  pairs of a bulk copy by address (a Write at ch08::bulk::bulk_copy) with a read of
#            chapter 08's weight ring (a Read at row_dot or row_dot_pair), which racecheck
#            cannot order;
#   OTHER    every other pair (and, where the summary counts errors but no report was printed,
#            that count): real races until shown otherwise;
#   CAPPED   1 where racecheck says it reached its maximum number of hazards (it records no
#            more in that launch, so a later race there goes unseen), else 0.
# A report reads
#   ========= Error: Race reported between <Read|Write> access at <function>+<offset> in <file:line>
#   =========     and <Read|Write> access at <function>+<offset> in <file:line> [N hazards]
#   =========     and ...                          (one line per other access it races with)
function ring(a, b) {
  return (a ~ /Write access at ch08::bulk::bulk_copy\(/ && b ~ /Read access at ch08::<unnamed>::row_dot(_pair)?\(/) ||
         (b ~ /Write access at ch08::bulk::bulk_copy\(/ && a ~ /Read access at ch08::<unnamed>::row_dot(_pair)?\(/)
}
/Race reported between / { first = $0; next }
/^=+ +and (Read|Write) access at / { if (ring(first, $0)) excused++; else other++; next }
/Maximum number of hazards reached/ { capped = 1 }
/RACECHECK SUMMARY: .*\([0-9]+ error/ { match($0, /\([0-9]+ error/); summary = substr($0, RSTART + 1, RLENGTH - 7) + 0 }
END {
  if (summary > 0 && other + excused == 0) other = summary  # errors, but no report to classify
  printf "%d %d %d\n", other + 0, excused + 0, capped + 0
}
