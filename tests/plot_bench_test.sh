#!/usr/bin/env bash
# tools/plot_bench.py on the committed results (docs/results/): the JSON, the CSV and
# the plain nccl-tests-style table of the same runs, alone and side by side; each must
# give a non-empty PNG (checked by its 8-byte magic) and an SVG. A file it cannot read
# must fail with status 2 naming it. Usage: plot_bench_test.sh SOURCE_DIR
set -euo pipefail
src=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
plot() { /usr/bin/python3 "$src/tools/plot_bench.py" "$@"; }
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "plot_bench_test: python3-matplotlib is missing: run tools/setup.sh" >&2
  exit 1
fi
r=$src/docs/results
check_png() {
  local f=$1
  [ -s "$f" ] || { echo "FAIL: $f missing or empty" >&2; exit 1; }
  magic=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
  [ "$magic" = 89504e470d0a1a0a ] || { echo "FAIL: $f is not a PNG (magic $magic)" >&2; exit 1; }
}
plot "$r/allreduce_4ranks_tcp_loopback.json" -o "$out/json" >/dev/null
check_png "$out/json.png"
[ -s "$out/json.svg" ] || { echo "FAIL: no SVG" >&2; exit 1; }
plot "$r/allreduce_4ranks_tcp_loopback.csv" -o "$out/csv.png" >/dev/null
check_png "$out/csv.png"
[ ! -e "$out/csv.svg" ] || { echo "FAIL: -o x.png wrote an SVG too" >&2; exit 1; }
plot "$r/allreduce_4ranks_tcp_loopback.txt" -o "$out/txt.png" >/dev/null
check_png "$out/txt.png"
plot "$r/allreduce_4ranks_tcp_loopback.json" "$r/allreduce_4ranks_shm.csv" \
  "$r/allreduce_4ranks_shm.txt" -l tcp -l "shm csv" -l "shm table" --series algorithm \
  --group in_place -o "$out/all.png" >/dev/null
check_png "$out/all.png"
# Errors: exit 2, naming the file.
echo "not a table" > "$out/bad.txt"
set +e
err=$(plot "$out/bad.txt" -o "$out/bad.png" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && [[ $err == *"$out/bad.txt: no result rows"* ]] ||
  { echo "FAIL: bad input: rc $rc, '$err'" >&2; exit 1; }
echo "plot_bench_test: OK"
