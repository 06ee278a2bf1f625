#!/usr/bin/env bash
# Puts each hole back, one at a time, in a copy of the repository (a patch, holeN.patch
# here), and runs the simulator's make-test budget on the copy: each must be found, at
# more than a handful of seeds. Prints, per hole, how many seeds of the budget found it
# (its hit rate), the first of them, what broke there, and whether the seed recorded
# for the hole (seeds.txt) replays it. Usage: internal/sim/holes/check.sh [hole numbers]
# (default: all). SIM_SCHEDULES sets the budget (default 10000, the make test budget);
# FAST=1 stops each hole's run at its first failures instead of counting them all.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
budget=${SIM_SCHEDULES:-10000}
keepgoing=-keepgoing
[ -n "${FAST:-}" ] && keepgoing=
holes=("$@")
if [ ${#holes[@]} -eq 0 ]; then
  holes=($(ls internal/sim/holes/hole*.patch | sed 's/.*hole\([0-9]*\)\.patch/\1/' | sort -n))
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
missed=0
for n in "${holes[@]}"; do
  patch=internal/sim/holes/hole$n.patch
  copy=$work/hole$n
  mkdir -p "$copy"
  # The files git knows of (tracked, and new ones not ignored), as they are on disk.
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && mkdir -p "$copy/$(dirname "$f")" && cp -p "$f" "$copy/$f"
  done
  (cd "$copy" && git apply --unidiff-zero "$root/$patch")
  echo "hole $n: $(head -1 "$patch" | sed 's/^# Puts back hole [0-9]*: //')"
  start=$(date +%s)
  out=$(cd "$copy" && go test ./internal/sim -run 'TestSim$' -count=1 -timeout 60m -schedules "$budget" $keepgoing -v 2>&1) && rc=0 || rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "  NOT FOUND in $budget schedules ($took s)"
    missed=$((missed + 1))
  else
    summary=$(echo "$out" | grep -E '^sim: [0-9]+ schedules \(' | head -1 || true)
    ran=$(echo "$summary" | sed -E 's/^sim: ([0-9]+) schedules.*/\1/')
    failed=$(echo "$summary" | sed -E 's/.* ([0-9]+) failed;.*/\1/')
    echo "$out" | grep -E 'failed schedules by check' | sed 's/^ *sim_test.go:[0-9]*: /  /' || true
    # The smallest seed of "first seed of each: map[check:seed ...]" (not the counts before it).
    first=$(echo "$out" | grep -E 'failed schedules by check' | sed -E 's/.*first seed of each: map\[([^]]*)\].*/\1/' |
      grep -oE ':[0-9]+' | tr -d ':' | sort -n | head -1 || true)
    (cd "$copy" && go test ./internal/sim -run 'TestSim$' -count=1 -seed "$first" 2>&1) | grep -E "seed $first: [a-z-]+: " | head -2 |
      sed 's/^ *sim_test.go:[0-9]*: /    /' | cut -c1-240 || true
    if [ -n "$keepgoing" ]; then
      echo "  found at $failed of $ran seeds ($(awk -v f="$failed" -v r="$ran" 'BEGIN { printf "%.1f", 100 * f / r }')%), the first $first ($took s, the copy's build included)"
    else
      echo "  found; the first of the seeds that failed before the run stopped: $first ($took s, the copy's build included)"
    fi
  fi
  # Each seed recorded for the hole (seeds.txt, a line each) must replay it. A replay
  # that fails for another reason than a broken promise (a build error, a bad flag)
  # does not count as one.
  seeds=$(awk -v n="$n" '$1 == n { print $2 }' internal/sim/holes/seeds.txt)
  if [ -z "$seeds" ]; then
    echo "  no seed recorded for hole $n in internal/sim/holes/seeds.txt"
    missed=$((missed + 1))
  fi
  for seed in $seeds; do
    replay=$(cd "$copy" && go test ./internal/sim -run 'TestSim$' -count=1 -seed "$seed" 2>&1) && rc=0 || rc=$?
    # (A here-string, not a pipe: grep -q would stop reading, and pipefail would count the
    # writer's SIGPIPE as a failure.)
    if [ $rc -ne 0 ] && grep -qE "seed $seed: [a-z-]+: " <<<"$replay"; then
      echo "  its recorded seed $seed replays it"
    elif [ $rc -eq 0 ]; then
      echo "  its recorded seed $seed does NOT replay it"
      missed=$((missed + 1))
    else
      echo "  its recorded seed $seed could not be replayed: $(tail -1 <<<"$replay")"
      missed=$((missed + 1))
    fi
  done
done
[ $missed -eq 0 ] || { echo "$missed check(s) failed: a hole not found, or its recorded seed not replaying it"; exit 1; }
