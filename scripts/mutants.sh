#!/usr/bin/env bash
# Mutation testing of the pure core (shared/src/{rotation,budget,plan,promotion}) against its unit
# tests (`cargo test -p nodecycle-shared --lib --no-default-features`: the core alone, without the
# AWS and Kubernetes adapters, so each mutant builds in about a third of the time), with
# cargo-mutants (`cargo install --locked cargo-mutants`; written against 27.1). Not part of
# scripts/test.sh: a full run takes hours.
#
#   scripts/mutants.sh                                  # every file of the pure core
#   scripts/mutants.sh shared/src/promotion/ledger.rs   # only these files
#   scripts/mutants.sh shared/src/budget/window.rs --re 'Window::gap_end'   # extra cargo-mutants options
#
# Arguments starting with `-` go to cargo-mutants as they are (`--re REGEX`, `--exclude-re REGEX`,
# `--shard 1/4`, ...; the next argument is taken as the value of --re/-F, --exclude-re/-E and
# --shard). The timeout is MUTANTS_TIMEOUT's.
#
# The survivors (cargo-mutants' "missed") are compared with scripts/mutants-baseline.txt, keyed by
# file and mutation without line numbers ("shared/src/x.rs: replace + with - in f"), so an edit
# elsewhere in a file does not break the comparison. Each baseline line is such a key, then ` # `
# and why the mutant is equivalent (a line without a reason is refused). The run fails (exit 1)
# when a mutant survives that the baseline does not list (as many times as it is listed: two equal
# mutations in one function need two lines), and names it; baseline lines whose mutant is now
# caught are reported as stale (remove them). Exit 2: cargo-mutants itself failed (the unmutated
# tree does not build or its tests fail, bad options).
#
# Environment: CARGO_TARGET_DIR (default ~/.cache/nodecycle/target, as scripts/env.sh);
# MUTANTS_OUT (default $CARGO_TARGET_DIR/mutants: mutants.out is written there);
# MUTANTS_IN_PLACE=1 mutates the checkout itself instead of a copy (faster: no copy to build; do
# not edit or commit while it runs); MUTANTS_TIMEOUT (seconds per test run; default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

baseline="scripts/mutants-baseline.txt"
core=(shared/src/rotation shared/src/budget shared/src/plan shared/src/promotion)

files=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --re | -F | --exclude-re | -E | --shard)
      [ $# -ge 2 ] || { echo "mutants.sh: $1 needs a value" >&2; exit 2; }
      extra+=("$1" "$2")
      shift 2
      ;;
    -*)
      extra+=("$1")
      shift
      ;;
    *)
      case "$1" in
        shared/src/rotation/* | shared/src/budget/* | shared/src/plan/* | shared/src/promotion/*) ;;
        *) echo "mutants.sh: $1 is not in the pure core (${core[*]})" >&2; exit 2 ;;
      esac
      [ -e "$1" ] || { echo "mutants.sh: no such file: $1" >&2; exit 2; }
      files+=("$1")
      shift
      ;;
  esac
done

# Every baseline line: a key, " # ", a reason.
if grep -nEv '^[[:space:]]*(#|$)' "$baseline" | grep -v ' # [^[:space:]]' >&2; then
  echo "mutants.sh: the baseline line(s) above give no reason (\"<key> # <why it is equivalent>\")" >&2
  exit 2
fi

scope=()
if [ ${#files[@]} -eq 0 ]; then
  for d in "${core[@]}"; do scope+=(-f "$d/**"); done
else
  for f in "${files[@]}"; do scope+=(-f "$f"); done
fi

out="${MUTANTS_OUT:-$CARGO_TARGET_DIR/mutants}"
mkdir -p "$out"
mode=()
[ "${MUTANTS_IN_PLACE:-0}" = 1 ] && mode=(--in-place)

echo "==> cargo mutants ${scope[*]} ${extra[*]} (output: $out/mutants.out)" >&2
start=$(date +%s)
set +e
cargo mutants "${mode[@]}" -p nodecycle-shared "${scope[@]}" --line-col=false \
  --baseline skip --timeout "${MUTANTS_TIMEOUT:-300}" --output "$out" --no-default-features --cargo-arg=--lib "${extra[@]}"
rc=$?
set -e
# 0: all caught; 2: some missed; 3: some timed out (compared below). Anything else: the tool failed.
case $rc in
  0 | 2 | 3) ;;
  *) echo "mutants.sh: cargo mutants failed (exit $rc); see $out/mutants.out/debug.log" >&2; exit 2 ;;
esac
took=$(( $(date +%s) - start ))

res="$out/mutants.out"
count() { cat "$res/$1.txt" 2>/dev/null | grep -c . || true; }
echo "==> $(count caught) caught, $(count missed) missed, $(count unviable) unviable, $(count timeout) timeout in $((took / 60)) min $((took % 60)) s" >&2

# cargo-mutants writes "file:line:col: mutation" whatever --line-col says: drop line and column.
keys() { sed -E -e 's/^([^:]+):[0-9]+:[0-9]+: /\1: /' -e 's/[[:space:]]*$//' "$@" 2>/dev/null | { grep . || true; } | LC_ALL=C sort; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
keys "$res/missed.txt" >"$tmp/missed"
# Examined this run (with --re or file arguments: only those baseline lines can be judged).
keys "$res/caught.txt" "$res/timeout.txt" "$res/unviable.txt" "$res/missed.txt" >"$tmp/examined"
grep -Ev '^[[:space:]]*(#|$)' "$baseline" | sed -e 's/ # .*//' -e 's/[[:space:]]*$//' | LC_ALL=C sort >"$tmp/baseline"

LC_ALL=C comm -23 "$tmp/missed" "$tmp/baseline" >"$tmp/new"
LC_ALL=C comm -13 "$tmp/missed" "$tmp/baseline" | LC_ALL=C comm -12 - <(LC_ALL=C sort -u "$tmp/examined") >"$tmp/stale"

if [ -s "$tmp/stale" ]; then
  echo "==> baseline lines whose mutant is now caught (remove them from $baseline):" >&2
  sed 's/^/    /' "$tmp/stale" >&2
fi
if [ -f "$res/timeout.txt" ] && [ -s "$res/timeout.txt" ]; then
  echo "==> timed out (counted as caught: a hang fails the tests; rerun with a larger --timeout if the machine is busy):" >&2
  sed 's/^/    /' "$res/timeout.txt" >&2
fi
if [ -s "$tmp/new" ]; then
  echo "==> FAIL: mutants that survive the unit tests and are not in $baseline:" >&2
  sed 's/^/    /' "$tmp/new" >&2
  echo "    kill each with a test that asserts behaviour, or, if it is equivalent, add its line with the reason" >&2
  exit 1
fi
echo "==> ok: every surviving mutant is in $baseline" >&2
