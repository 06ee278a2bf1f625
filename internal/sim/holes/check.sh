#!/usr/bin/env bash
# Puts each hole of issue 19 back, one at a time, in a copy of the repository (a patch
# on idem/, holeN.patch here), and runs the simulator's make-test budget on the copy:
# each must be found. Prints, per hole, the first seeds that broke a promise and what
# broke. Usage: internal/sim/holes/check.sh [hole numbers]   (default: all)
# SIM_SCHEDULES sets the budget (default 10000, the make test budget).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
budget=${SIM_SCHEDULES:-10000}
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
  out=$(cd "$copy" && go test ./internal/sim -run 'TestSim$' -count=1 -timeout 30m -schedules "$budget" -v 2>&1) && rc=0 || rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "  NOT FOUND in $budget schedules ($took s)"
    missed=$((missed + 1))
  else
    echo "$out" | grep -E 'seed [0-9]+ failed' | head -3 | sed 's/^ *sim_test.go:[0-9]*: /  /; s/ (fold=.*)://'
    echo "$out" | grep -A3 -E 'seed [0-9]+ failed' | grep -E '^\s+[a-z-]+: ' | head -3 | sed 's/^ */    /'
    echo "$out" | grep -E 'sim: [0-9]+ schedules' | sed 's/^ *sim_test.go:[0-9]*: /  /; s/ on 2 workers.*//'
    echo "  found ($took s, the copy's build included)"
  fi
  # The seed recorded for the hole (seeds.txt) must replay it.
  seed=$(awk -v n="$n" '$1 == n { print $2 }' internal/sim/holes/seeds.txt)
  if [ -z "$seed" ]; then
    echo "  no seed recorded for hole $n in internal/sim/holes/seeds.txt"
    missed=$((missed + 1))
  elif (cd "$copy" && go test ./internal/sim -run 'TestSim$' -count=1 -seed "$seed" >/dev/null 2>&1); then
    echo "  its recorded seed $seed does NOT replay it"
    missed=$((missed + 1))
  else
    echo "  its recorded seed $seed replays it"
  fi
done
[ $missed -eq 0 ] || { echo "$missed check(s) failed: a hole not found, or its recorded seed not replaying it"; exit 1; }
