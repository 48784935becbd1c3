# The last step of lab.sh and p2p.sh (sourced; they define `step` and OUT):
#   finish STATUS INCONCLUSIVE
# prints the result and exits 1 when a step failed, else 2 when the comparison left a row
# INCONCLUSIVE (compare.py's rule: not a pass), else 0.
finish() {
  if [ "$1" -ne 0 ]; then
    step "result: FAIL  (artifacts in $OUT)"
    exit 1
  fi
  if [ "$2" -ne 0 ]; then
    step "result: INCONCLUSIVE: rows the comparison could not decide, see $OUT/compare.txt  (artifacts in $OUT)"
    exit 2
  fi
  step "result: PASS  (artifacts in $OUT)"
  exit 0
}
