# Sourced by scripts/test and scripts/test-lines. The rule it keeps: one failing stage never stops
# the stages after it; every stage's name, result and seconds are printed in ONE summary at the end,
# and the run exits non-zero when any stage failed.
#
#   stage NAME COMMAND [ARGS...]   run COMMAND as one stage (under set -e in a subshell, so a stage
#                                  stops at its own first failure, and only itself)
#   skip NAME WHY                  a stage left out on purpose, listed as such
#   side_by_side FUNCTION...       run each FUNCTION (a shell function of stages) at the same time,
#                                  each with its own log and output, printed whole, in the order
#                                  given, once all have ended (SIDE_BY_SIDE=0: one after the other)
#   finish                         the summary, and the exit status (0 only when none failed)
#
# A failing stage's summary row is followed by what it wrote to the file $STAGES_FAILURES names
# (at most 10 lines): this project's pytest writes each test that failed there (tests/conftest.py),
# so the end of the run's output says which tests failed, not only which stage.
#
# A script run by another's stage (scripts/test-lines under scripts/test) adds its stages to the
# caller's summary, named "CALLER-STAGE: NAME", and prints none of its own.

if [ -z "${STAGES_LOG:-}" ]; then
  STAGES_LOG=$(mktemp)
  STAGES_OWNER=$$
  export STAGES_LOG
  trap 'rm -f "$STAGES_LOG"' EXIT
fi
STAGES_PREFIX=${STAGES_PREFIX:-}
STAGES_FIRST=$(($(wc -l <"$STAGES_LOG") + 1)) # this script's stages start at this line of the log

_stage_record() { # RESULT SECONDS NAME
  printf '%s\t%s\t%s\n' "$1" "$2" "$STAGES_PREFIX$3" >>"$STAGES_LOG"
}

stage() {
  local name=$1 start=$SECONDS rc before after failures
  shift
  before=$(wc -l <"$STAGES_LOG")
  failures=$(mktemp)
  echo "=== stage ${STAGES_PREFIX}${name}: $*"
  set +e
  (
    set -e
    STAGES_PREFIX="${STAGES_PREFIX}${name}: "
    STAGES_FAILURES=$failures
    export STAGES_PREFIX STAGES_FAILURES
    "$@"
  )
  rc=$?
  set -e
  after=$(wc -l <"$STAGES_LOG")
  if [ "$after" -gt "$before" ]; then
    # A script of stages: they are counted; this line only groups them, unless it failed with
    # none of them failing (it broke outside its stages), which counts as its own failure.
    if [ "$rc" -ne 0 ] && ! tail -n +"$((before + 1))" "$STAGES_LOG" | grep -q '^FAIL'; then
      _stage_record FAIL $((SECONDS - start)) "$name (outside its stages)"
    else
      _stage_record "$([ "$rc" -eq 0 ] && echo '(ok)' || echo '(failed)')" $((SECONDS - start)) "$name: its stages above"
    fi
  elif [ "$rc" -eq 0 ]; then
    _stage_record pass $((SECONDS - start)) "$name"
  else
    echo "=== stage ${STAGES_PREFIX}${name} FAILED (exit $rc); the next stages still run" >&2
    _stage_record FAIL $((SECONDS - start)) "$name"
    head -n 10 "$failures" | while IFS= read -r line; do printf 'what\t-\t%s\n' "$line" >>"$STAGES_LOG"; done
  fi
  rm -f "$failures"
  return 0
}

skip() {
  echo "=== stage ${STAGES_PREFIX}$1 skipped: $2"
  _stage_record skip 0 "$1 ($2)"
}

# Chains of stages run at once take about the time of the longest, not of all. Each chain keeps a log
# of its own, since stage() reads a nested script's stages off the log's growth, which a chain beside
# it would also grow; the logs join the run's when all have ended.
side_by_side() {
  local dir fn i pids=() rc
  if [ "${SIDE_BY_SIDE:-1}" = "0" ]; then
    for fn in "$@"; do "$fn"; done
    return 0
  fi
  dir=$(mktemp -d)
  echo "=== side by side: $* (the output of each follows when all have ended)"
  i=0
  for fn in "$@"; do
    (
      STAGES_LOG="$dir/$i.log"
      : >"$STAGES_LOG"
      "$fn"
    ) >"$dir/$i.out" 2>&1 &
    pids+=("$!")
    i=$((i + 1))
  done
  # An interrupted run stops the chains too, instead of leaving them running.
  trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM
  for i in "${!pids[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    [ "$rc" -eq 0 ] || _stage_record FAIL 0 "${*:$((i + 1)):1} (outside its stages, exit $rc)"
  done
  trap - INT TERM
  i=0
  for fn in "$@"; do
    echo "=== side by side: $fn, its output"
    cat "$dir/$i.out"
    cat "$dir/$i.log" >>"$STAGES_LOG"
    i=$((i + 1))
  done
  rm -rf "$dir"
}

finish() {
  local failed
  failed=$(tail -n +"$STAGES_FIRST" "$STAGES_LOG" | grep -c '^FAIL' || true)
  if [ "${STAGES_OWNER:-}" != "$$" ]; then
    # Run by another script's stage: its summary lists these stages; fail that stage if one failed.
    [ "$failed" -eq 0 ]
    return
  fi
  local passed skipped
  passed=$(grep -c '^pass' "$STAGES_LOG" || true)
  skipped=$(grep -c '^skip' "$STAGES_LOG" || true)
  echo
  echo "=== summary: every stage, in the order it ended (the chains run side by side: one after the other)"
  while IFS=$'\t' read -r result seconds name; do
    if [ "$result" = what ]; then
      printf '  %-8s %6s   %s\n' "" "" "$name" # what failed in the stage above
    else
      printf '  %-8s %6ss  %s\n' "$result" "$seconds" "$name"
    fi
  done <"$STAGES_LOG"
  echo "  total ${SECONDS}s"
  # One plain closing line: stages, not tests (pytest's own counts are in its stage's output).
  echo "stages: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}
