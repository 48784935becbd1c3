# The exit codes of the GPU scripts and of all.sh, and where they are read: sourced by lab.sh, p2p.sh and
# collectives.sh (they define `step` and OUT) and by all.sh.
#
#   0  PASS          every step ran and passed
#   1  FAIL          a step failed: a FAIL or MISSING row, a failed check, a timeout, a script error
#   2  INCONCLUSIVE  the comparison left a row undecided after its last round: not a pass
#   3  SKIPPED       this machine cannot run it (p2p on one GPU), with the reason
# A failure wins over INCONCLUSIVE, and INCONCLUSIVE over SKIPPED. Bash exits 2 on a syntax error and python
# when it cannot open a script, so an exit 2 counts as INCONCLUSIVE only beside the verdict's own line (the
# comparison's summary "...; exit 2 (INCONCLUSIVE: ...", a script's "== result: INCONCLUSIVE"), and an exit 3
# as SKIPPED only beside a "SKIPPED" line; any other exit 2 or 3 is a FAIL.

# finish STATUS INCONCLUSIVE: the last step of a script. Prints the result with the rules that judged the run
# (RULES_LABEL) and exits 1 when a step failed, else 2 when the comparison left a row INCONCLUSIVE, else 0.
finish() {
  local rules=${RULES_LABEL:-rules unknown}
  if [ "$1" -ne 0 ]; then
    step "result: FAIL  (artifacts in $OUT; $rules)"
    exit 1
  fi
  if [ "$2" -ne 0 ]; then
    step "result: INCONCLUSIVE: rows the comparison could not decide, see $OUT/compare.txt  (artifacts in $OUT; $rules)"
    exit 2
  fi
  step "result: PASS  (artifacts in $OUT; $rules)"
  exit 0
}

# skip REASON: this machine cannot run the script; exits 3.
skip() {
  step "result: SKIPPED ($*)"
  exit 3
}

# compare_status RC FILE: what a comparison script's exit RC means, its output in FILE: prints pass, fail or
# inconclusive (2 only with the summary line that says INCONCLUSIVE, as compare.py's scripts print it last).
compare_status() {
  case "$1" in
    0) echo pass ;;
    2) if grep -v '^[[:space:]]*$' "$2" 2>/dev/null | tail -n 1 | grep -q '; exit 2 (INCONCLUSIVE'; then
         echo inconclusive
       else
         echo fail
       fi ;;
    *) echo fail ;;
  esac
}

# part_verdict RC LOG LIMIT SECONDS: all.sh's line for a part that exited RC after SECONDS under a timeout of
# LIMIT, its output in LOG: "PASS (...)", "INCONCLUSIVE (...)", "SKIPPED (reason)" or "FAIL (...)".
part_verdict() {
  local rc=$1 log=$2 limit=$3 seconds=$4 line
  case "$rc" in
    0) echo "PASS ($seconds s of $limit)" ;;
    124|137) echo "FAIL (timed out after $limit s)" ;;
    2) line=$(grep -E '^== result: ' "$log" 2>/dev/null | tail -n 1)
       if [[ "$line" == "== result: INCONCLUSIVE"* ]]; then
         echo "INCONCLUSIVE (exit 2: a row the interleaved rounds could not decide, $seconds s)"
       else
         echo "FAIL (exit 2 without an INCONCLUSIVE result: a script error, $seconds s)"
       fi ;;
    3) line=$(grep -E '^(== result: )?SKIPPED' "$log" 2>/dev/null | tail -n 1)
       if [ -n "$line" ]; then
         line=${line#== result: }
         line=${line#SKIPPED}
         line=${line#:}
         line=${line# }
         line=${line#(}
         line=${line%)}
         echo "SKIPPED (${line:0:160})"
       else
         echo "FAIL (exit 3 without a SKIPPED line, $seconds s)"
       fi ;;
    *) echo "FAIL (exit $rc, $seconds s)" ;;
  esac
}

# Loads the schedule NAME of tests/gpu/rules.json into RULES_* and prints it (lab.sh, p2p.sh, collectives.sh);
# an unreadable rules file fails the script.
load_rules() {
  step "rules"
  local rules
  rules=$(python3 tests/gpu/rules.py shell "$1") || { RULES_LABEL="rules unreadable"; finish 1 0; }
  eval "$rules"
  echo "$RULES_LABEL (tests/gpu/rules.json): $RULES_ROUNDS rounds, up to $RULES_MAX_ROUNDS, deadline $RULES_DEADLINE_S s"
}
