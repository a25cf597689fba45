#!/usr/bin/env bash
# tools/sim_validate.py --fit finds a machine's constants: "measured" lines made by
# gyre-sim itself with known constants (alpha 25 us between hosts, 12 us a shm hand-off,
# 2 x 4 ranks at 1 Gbit/s, 8 B-128 KiB, ring, tree, hier, auto) must be fitted back to
# exactly those constants, all cells at 0% error, even when the flags after -- name other
# values (the grid replaces them); a point off the grid's step lands on a neighbour; bad
# grids are refused with exit status 2 and a message naming what is wrong.
# Usage: sim_fit_test.sh BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
src=$2
sim=$build/bin/gyre-sim
validate=(python3 "$src/tools/sim_validate.py")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cluster=(--hosts 2 --ranks-per-host 4 --nic host --link 1gbit)
fail() { echo "FAIL: $*"; exit 1; }

"$sim" "${cluster[@]}" --alpha-us 25 --shm-alpha-us 12 --compare-algos -b 8 -e 128K -f 4 \
  > "$dir/measured.txt"
(( $(grep -c '^compare: bytes=' "$dir/measured.txt") == 8 )) || fail "gyre-sim printed no 8 rows"

"${validate[@]}" "$dir/measured.txt" --sim "$sim" --algos ring,tree,hier,auto --check \
  --fit alpha-us=5:40:5,shm-alpha-us=4:20:4 -- "${cluster[@]}" --alpha-us 99 --shm-alpha-us 99 \
  > "$dir/fit.txt" || { cat "$dir/fit.txt"; fail "the fitted constants left cells out of bounds"; }
cat "$dir/fit.txt"
grep -qx 'fit: alpha-us=25 shm-alpha-us=12: 32 of 32 within bounds (sum |log(predicted/measured)| 0.00)' \
  "$dir/fit.txt" || fail "did not fit alpha 25, shm 12 exactly"
grep -q '^runner-up: ' "$dir/fit.txt" || fail "no runner-up line"
# Every cell of the winner's table at 0%.
(( $(grep -o '(+0%)\|(-0%)' "$dir/fit.txt" | wc -l) == 32 )) || fail "not every cell at 0%"

# Truth between grid points: alpha 27 on a grid of step 10 lands on 20 or 30.
"$sim" "${cluster[@]}" --alpha-us 27 --shm-alpha-us 12 --compare-algos -b 8 -e 2K -f 4 \
  > "$dir/measured27.txt"
"${validate[@]}" "$dir/measured27.txt" --sim "$sim" --algos ring,tree,hier,auto \
  --fit alpha-us=10:50:10 -- "${cluster[@]}" --shm-alpha-us 12 > "$dir/fit27.txt"
grep -Eq '^fit: alpha-us=(20|30): ' "$dir/fit27.txt" || { cat "$dir/fit27.txt"; fail "alpha 27 not fitted to a neighbour"; }

# Refused grids.
for bad in "alpha-us=1:2" "alpha-us=5:1:1" "alpha-us=1:5:0" "alpha-us=1:100000:1"; do
  set +e
  msg=$("${validate[@]}" "$dir/measured.txt" --sim "$sim" --fit "$bad" -- "${cluster[@]}" 2>&1)
  rc=$?
  set -e
  (( rc == 2 )) || fail "--fit $bad: exit $rc, want 2"
  [[ $msg == *"--fit"* ]] || fail "--fit $bad: message does not name --fit: $msg"
done
echo "PASS"
