#!/usr/bin/env bash
# tools/plot_bench.py on the committed results (bench/results/): the JSON, the CSV and
# the plain nccl-tests-style table of the same runs, alone and side by side; each must
# give a non-empty PNG (checked by its 8-byte magic) and an SVG; the peer harness's
# committed tables must be read field by field (in place, time and busbw). A file it
# cannot read must fail with status 2 naming it. Usage: plot_bench_test.sh SOURCE_DIR
set -euo pipefail
src=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
plot() { /usr/bin/python3 "$src/tools/plot_bench.py" "$@"; }
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "plot_bench_test: python3-matplotlib is missing: run tools/setup.sh" >&2
  exit 1
fi
r=$src/bench/results
check_png() {
  local f=$1
  [ -s "$f" ] || { echo "FAIL: $f missing or empty" >&2; exit 1; }
  magic=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
  [ "$magic" = 89504e470d0a1a0a ] || { echo "FAIL: $f is not a PNG (magic $magic)" >&2; exit 1; }
}
plot "$r/allreduce_4ranks/tcp_loopback.json" -o "$out/json" >/dev/null
check_png "$out/json.png"
[ -s "$out/json.svg" ] || { echo "FAIL: no SVG" >&2; exit 1; }
plot "$r/allreduce_4ranks/tcp_loopback.csv" -o "$out/csv.png" >/dev/null
check_png "$out/csv.png"
[ ! -e "$out/csv.svg" ] || { echo "FAIL: -o x.png wrote an SVG too" >&2; exit 1; }
plot "$r/allreduce_4ranks/tcp_loopback.txt" -o "$out/txt.png" >/dev/null
check_png "$out/txt.png"
plot "$r/allreduce_4ranks/tcp_loopback.json" "$r/allreduce_4ranks/shm.csv" \
  "$r/allreduce_4ranks/shm.txt" -l tcp -l "shm csv" -l "shm table" --series algorithm \
  --group in_place -o "$out/all.png" >/dev/null
check_png "$out/all.png"
# The peer harness's 11-column tables (bench/results/peers_*): one in-place group, read
# field by field; with the default group (out-of-place) there is nothing to plot.
p=$r/peers_netns_4x1_2gbit
plot "$p/netns_gyre_tcp_n4_2gbit.txt" "$p/netns_gloo_ring_chunked_n4_2gbit.txt" \
  "$p/netns_mpi_tcp_n4_2gbit.txt" --group in_place --link-rate 0.25 -o "$out/peers.png" >/dev/null
check_png "$out/peers.png"
set +e
err=$(plot "$p/netns_gloo_ring_chunked_n4_2gbit.txt" -o "$out/oop.png" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && [[ $err == *"no out_of_place rows"* ]] ||
  { echo "FAIL: a harness table gave out-of-place rows: rc $rc, '$err'" >&2; exit 1; }
printf '%s\n' '# sweep -b 8 -e 16 -f 2  iters: clamp(1/size, 3, 20)  out-of-place' \
  '             8            2  float    sum       10.50    0.0008    0.0011       0     20        9.00    0.0013' \
  > "$out/harness_oop.txt"
/usr/bin/python3 - "$src/tools" "$p/netns_gloo_ring_chunked_n4_2gbit.txt" "$out/harness_oop.txt" <<'PY'
import sys
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, sys.argv[1])
import plot_bench
rows = plot_bench.read_results(sys.argv[2])
table = [w.split() for w in open(sys.argv[2]) if w.strip() and not w.startswith("#")]
assert [r["size"] for r in rows] == [int(w[0]) for w in table], [r["size"] for r in rows]
assert [r["in_place"] for r in rows] == [(float(w[4]), float(w[6])) for w in table], rows
assert all(r["out_of_place"] is None and r["type"] == "float" for r in rows), rows[0]
oop = plot_bench.read_results(sys.argv[3])
assert oop == [{"collective": "", "algorithm": "", "type": "float", "redop": "sum", "size": 8,
                "out_of_place": (10.5, 0.0011), "in_place": None}], oop
PY
# Errors: exit 2, naming the file.
echo "not a table" > "$out/bad.txt"
set +e
err=$(plot "$out/bad.txt" -o "$out/bad.png" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && [[ $err == *"$out/bad.txt: no result rows"* ]] ||
  { echo "FAIL: bad input: rc $rc, '$err'" >&2; exit 1; }
echo "plot_bench_test: OK"
