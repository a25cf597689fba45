#!/usr/bin/env bash
# GYRE_TIMELINE on a real 2-rank gyre-train run (base/timeline.h): each rank writes its
# Chrome trace; in it every step has the training thread's forward/backward/finish spans
# and, on GradSync's worker, one "bucket all-reduce" per bucket (the count gyre-train
# prints) with the communicator's allreduce span nested inside it (same bytes) and the
# schedule's phases nested in that; tools/gyre_timeline.py merges the ranks onto one
# clock and reports each bucket's overlap with backward, which must be non-zero, and
# draws steps 3-5 as a PNG.
# Usage: timeline_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

GYRE_TIMELINE="$out/tl-{rank}.json" timeout -k 5 120 "$build/bin/gyrerun" -n 2 \
  "$build/bin/gyre-train" --epochs 1 --max-samples 2000 > "$out/train.txt" 2> "$out/train.err" ||
  fail "gyre-train failed: $(cat "$out/train.err")"
buckets=$(sed -n 's/.* buckets \([0-9]*\) .*/\1/p' "$out/train.txt")
[ -n "$buckets" ] || fail "gyre-train printed no bucket count: $(cat "$out/train.txt")"
for r in 0 1; do [ -s "$out/tl-$r.json" ] || fail "no timeline for rank $r"; done

/usr/bin/python3 - "$out" "$buckets" <<'PY' || exit 1
import json, sys
out, buckets = sys.argv[1], int(sys.argv[2])
def inside(a, b):  # a within b, same thread
    return a["tid"] == b["tid"] and b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + 0.002
for rank in (0, 1):
    d = json.load(open(f"{out}/tl-{rank}.json"))
    o = d["otherData"]
    assert o["schema"] == "gyre-timeline" and o["version"] == 1 and o["rank"] == rank, o
    assert o["dropped"] == 0, o
    x = [e for e in d["traceEvents"] if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in d["traceEvents"] if e["name"] == "thread_name"}
    steps = sorted((e for e in x if e["name"] == "step"), key=lambda e: e["ts"])
    assert len(steps) == 16, f"rank {rank}: {len(steps)} steps, expected 16 (1000 samples / 64)"
    for name in ("forward", "backward", "finish (wait for all-reduces)", "optimizer"):
        spans = [e for e in x if e["name"] == name]
        assert len(spans) == 16, f"rank {rank}: {len(spans)} {name} spans"
        assert all(names.get(e["tid"]) == "training" for e in spans), name
        assert all(any(inside(e, s) for s in steps) for e in spans), f"{name} outside its step"
    bucket_spans = [e for e in x if e["name"] == "bucket all-reduce"]
    assert len(bucket_spans) == 16 * buckets, f"rank {rank}: {len(bucket_spans)} bucket spans"
    allreduces = [e for e in x if e["name"] == "allreduce" and e["cat"] == "collective"]
    phases = [e for e in x if e["cat"] == "phase"]
    for b in bucket_spans:
        assert names.get(b["tid"]) == "GradSync worker", b
        inner = [a for a in allreduces if inside(a, b)]
        assert len(inner) == 1, f"bucket {b['args']} holds {len(inner)} allreduce spans"
        a = inner[0]
        assert a["args"]["bytes"] == b["args"]["bytes"], (a, b)
        assert a["args"]["algorithm"] in ("ring", "tree", "rd"), a
        for p in phases:
            if a["ts"] <= p["ts"] < a["ts"] + a["dur"] and p["tid"] == a["tid"]:
                assert inside(p, a), f"phase {p} sticks out of {a}"
    per_step = [sum(1 for b in bucket_spans if s["ts"] <= b["ts"] <= s["ts"] + s["dur"]) for s in steps]
    assert per_step == [buckets] * 16, per_step
print("timeline_test: per-rank traces OK")
PY

python3 "$src/tools/gyre_timeline.py" "$out/tl-0.json" "$out/tl-1.json" -o "$out/merged.json" \
  --report > "$out/report.txt" || fail "merge failed"
cat "$out/report.txt"
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["otherData"]["ranks"] == [0, 1], d["otherData"]
ts = [e["ts"] for e in d["traceEvents"] if "ts" in e]
assert min(ts) == 0 and max(ts) < 120e6, (min(ts), max(ts))
assert {e["pid"] for e in d["traceEvents"] if e.get("ph") == "X"} == {0, 1}
' "$out/merged.json" || fail "merged trace"
for r in 0 1; do
  line=$(grep "^overlap: rank $r: 16 steps, $((16 * buckets)) bucket all-reduces ($buckets per step)" \
    "$out/report.txt") || fail "no overlap line for rank $r"
  started=$(sed -n 's/.*buckets that started during backward \([0-9]*\)$/\1/p' <<< "$line")
  [ "$started" -gt 0 ] || fail "rank $r: no bucket all-reduce started during backward: $line"
done
# The picture: steps 3 to 5 (of 16) of both ranks' training and GradSync rows, a PNG.
/usr/bin/python3 "$src/tools/gyre_timeline.py" "$out/tl-0.json" "$out/tl-1.json" \
  --draw "$out/tl.png" --window 3:5 > "$out/draw.txt" || fail "--draw failed"
grep -q "^drawn: 4 rows, [0-9]* spans -> $out/tl.png$" "$out/draw.txt" ||
  fail "--draw: $(cat "$out/draw.txt")"
[ "$(head -c 8 "$out/tl.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "--draw wrote no PNG"
# Unreadable input, a window the trace does not have: exit 2, naming it.
echo '{}' > "$out/bad.json"
set +e
err=$(python3 "$src/tools/gyre_timeline.py" "$out/bad.json" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && [[ $err == *"bad.json: not a GYRE_TIMELINE file"* ]] || fail "bad input: $rc $err"
set +e
err=$(/usr/bin/python3 "$src/tools/gyre_timeline.py" "$out/tl-0.json" --draw "$out/x.png" \
  --window 3:40 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && [[ $err == *"--window 3:40: rank 0 has steps 0-15"* ]] || fail "bad window: $rc $err"
echo "timeline_test: OK"
