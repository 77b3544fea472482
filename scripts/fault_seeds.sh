#!/usr/bin/env bash
# Run the randomized fault scenarios over many seeds, one seed per pytest process, one process at a
# time, and summarize what failed by failure class.
#
# Why outside the test command: a seeded scenario runs once per run with a fresh random seed
# (tests/faults/conftest.py), so a rare failure class shows up once in many runs. Some outcomes
# also depend on timing, not on the seed alone (what a restarted bookie replays over flipped
# pages), so each seed gets a fresh process and a failure's seed may not reproduce it: the
# failure's first line and its log are kept.
#
# Usage: scripts/fault_seeds.sh [-n COUNT] [-s FIRST_SEED] [-k EXPR] [-o DIR] [TEST_PATH...]
#   -n COUNT       seeds to run (default 200)
#   -s FIRST_SEED  run FIRST_SEED, FIRST_SEED+1, ... (default: COUNT seeds drawn at random)
#   -k EXPR        pytest -k expression (default: every seeded test of the paths)
#   -o DIR         where each seed's junit XML and output go (default: a new temporary directory)
#   TEST_PATH      default tests/faults/test_bitflips.py
# Example (niced, in the background): nice -n 19 scripts/fault_seeds.sh -n 200 >seeds.log 2>&1 &
# Prints one line per seed and test as it goes, then the counts, the failure classes and how often
# each scenario ended each way (the "outcome" the scenarios record, e.g. refused / repaired).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
count=200
first=""
expr=""
out=""
while getopts "n:s:k:o:" opt; do
  case $opt in
    n) count=$OPTARG ;;
    s) first=$OPTARG ;;
    k) expr=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
paths=("$@")
[[ ${#paths[@]} -gt 0 ]] || paths=(tests/faults/test_bitflips.py)
out=${out:-$(mktemp -d -t fault-seeds.XXXXXX)}
mkdir -p "$out"
# The scenarios' figures (tests/faults/nemesis.py record), such as each run's outcome, for the summary.
export FAULTS_REPORT=${FAULTS_REPORT:-$out/figures.jsonl}

if [[ -n $first ]]; then
  seeds=$(seq "$first" $((first + count - 1)))
else
  seeds=$($PY -c "import random; r = random.SystemRandom(); print(*r.sample(range(1, 1_000_000), $count))")
fi

echo "fault seeds: ${count} seeds of ${paths[*]}${expr:+ -k $expr}; outputs in $out"
started=$(date +%s)
for seed in $seeds; do
  args=(-q -p no:cacheprovider -o junit_family=xunit1 --junitxml "$out/seed$seed.xml" "${paths[@]}")
  [[ -n $expr ]] && args+=(-k "$expr")
  FAULTS_SEEDS=$seed $PY -m pytest "${args[@]}" >"$out/seed$seed.out" 2>&1
  $PY scripts/fault_seeds_report.py line "$out/seed$seed.xml" "$seed"
done
echo "== ${count} seeds in $(( $(date +%s) - started )) s"
$PY scripts/fault_seeds_report.py summary "$out"
