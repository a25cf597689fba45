#!/usr/bin/env python3
"""The measured tables of docs/benchmarks.md, docs/pytorch.md and docs/scaling.md, made from the committed results (bench/results/).

Each table sits between `<!-- table: NAME -->` and `<!-- end table -->`; this script
rewrites only what lies between them: the table, computed from the result folder's raw
files (or its transcribed CSV where no raw output was kept), and a line naming the folder
with the date, machine and commit of its meta.json.

  tools/bench_tables.py            rewrite the tables in docs/benchmarks.md, docs/pytorch.md
                                   and docs/scaling.md
  tools/bench_tables.py --check    change nothing; exit 1 and print a diff where a page
                                   differs from what the data gives (ctest bench_tables)

Standard library only (Python 3.11).
"""
import argparse
import csv
import difflib
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
PYTORCH_PAGE = ROOT / "docs" / "pytorch.md"
MIB = 1 << 20
LINK_BYTES_PER_US = {"2gbit": 250.0, "500mbit": 62.5, "1gbit": 125.0}


# ---------------------------------------------------------------- reading the raw files

def table_rows(path):
    """size -> fields of every data row of a gyre-bench, peers'-harness or mpi_bench table."""
    rows = {}
    for line in (RESULTS / path).read_text().splitlines():
        f = line.split()
        if f and not line.startswith("#") and f[0].isdigit() and len(f) >= 8:
            rows[int(f[0])] = f
    return rows


def in_place_us(path):
    """size -> in-place time per op (us): gyre-bench's in-place column (13 fields), the
    harness's and mpi_bench's only time column (11 fields)."""
    return {s: float(f[9] if len(f) >= 13 else f[4]) for s, f in table_rows(path).items()}


def out_of_place_us(path):
    return {s: float(f[5]) for s, f in table_rows(path).items()}


def pct_of_link(size, us, rate, ranks=4):
    """all-reduce busbw (2(n-1)/n x size / time) as % of a link rate."""
    return 100.0 * 2 * (ranks - 1) / ranks * size / us / LINK_BYTES_PER_US[rate]


def ddp_runs(path, block=None):
    """[(round, backend, samples/s)] of tools/ddp_netns_bench.sh's output; block picks one
    run out of a file holding several (its `=== H L RATE --model M` line)."""
    text = (RESULTS / path).read_text()
    if block is not None:
        parts = re.split(r"^=== ", text, flags=re.M)
        text = next(p for p in parts if p.startswith(block))
    return [(int(r), b, float(v)) for r, b, v in
            re.findall(r"^round (\d+) (\S+) samples_per_s=(\d+)", text, flags=re.M)]


def per_round(runs, key=lambda b: b):
    rounds = {}
    for r, b, v in runs:
        rounds.setdefault(r, {})[key(b)] = v
    return [rounds[r] for r in sorted(rounds)]


def ratios(rounds, num, den):
    return [r[num] / r[den] for r in rounds if num in r and den in r]


def compare_lines(path):
    """[{bytes, ring_us, tree_us, hier_us, auto_us, auto_algo}] of --compare-algos output."""
    out = []
    for line in (RESULTS / path).read_text().splitlines():
        if line.startswith("compare: bytes="):
            kv = dict(w.split("=", 1) for w in line.split()[1:])
            out.append(kv)
    return out


def read_csv(path):
    with open(RESULTS / path, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- formatting

def size_label(s):
    if s >= MIB:
        return f"{s // MIB} MiB"
    if s >= 1024:
        return f"{s // 1024} KiB"
    return f"{s} B"


def us_label(us):
    if us < 1000:
        return f"{us:.0f} us"
    ms = us / 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def us_range(xs):
    lo, hi = us_label(min(xs)), us_label(max(xs))
    if lo == hi:
        return lo
    (a, unit_a), (b, unit_b) = lo.split(), hi.split()
    return f"{a}-{b} {unit_b}" if unit_a == unit_b else f"{lo}-{hi}"


def num_range(xs, fmt="{:.2f}", sep="-"):
    a, b = fmt.format(min(xs)), fmt.format(max(xs))
    return a if a == b else f"{a}{sep}{b}"


def thousands(x):
    return f"{x:,.0f}"


# ---------------------------------------------------------------- the tables

LIBS_NETNS = [  # (label, file stem of the harness)
    ("gyre", "netns_gyre_tcp"), ("Gloo ring_chunked", "netns_gloo_ring_chunked"),
    ("Gloo allreduce_ring", "netns_gloo_allreduce_ring"),
    ("Gloo halving_doubling", "netns_gloo_halving_doubling"), ("torch gloo", "netns_torch_gloo"),
    ("Open MPI tcp", "netns_mpi_tcp")]


def netns_cell(folder, stem, rate, size):
    us = in_place_us(f"{folder}/{stem}_n4_{rate}.txt")[size]
    return f"{pct_of_link(size, us, rate):.0f}%" if size >= MIB else us_label(us)


def t_peers_quiet():
    folder = "peers_netns_4x1_2gbit_quiet"
    header = ["size"] + [label for label, _ in LIBS_NETNS]
    rows = [[size_label(s)] + [netns_cell(folder, stem, "2gbit", s) for _, stem in LIBS_NETNS]
            for s in (8, 256, 4096, 65536, MIB, 16 * MIB, 64 * MIB)]
    return header, rows, [folder]


def t_peers_first():
    folder = "peers_netns_4x1_2gbit_500mbit"
    libs = [("gyre", "gyre"), ("Gloo allreduce_ring", "gloo_allreduce_ring"),
            ("Gloo ring_chunked", "gloo_ring_chunked"), ("torch gloo", "torch_gloo"),
            ("Open MPI tcp", "mpi_tcp")]
    data = {(r["link"], int(r["size_bytes"]), r["library"]): (r["pct_min"], r["pct_max"])
            for r in read_csv(f"{folder}/summary.csv")}
    header = ["link", "size"] + [label for label, _ in libs]
    rows = []
    for link, name in (("2gbit", "2 Gbit/s"), ("500mbit", "500 Mbit/s")):
        for i, s in enumerate(sorted({k[1] for k in data if k[0] == link})):
            cells = []
            for _, key in libs:
                lo, hi = data[(link, s, key)]
                cells.append(f"{lo}%" if lo == hi else f"{lo}-{hi}%")
            rows.append([name if i == 0 else "", size_label(s)] + cells)
    return header, rows, [folder]


SIZES_4_64 = [4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB]


def busy_means(folder, variant, stem, column):
    """(mode, size) -> mean over the three rounds of % of the 2 Gbit/s link."""
    out = {}
    for mode in ("quiet", "hogs"):
        for s in SIZES_4_64:
            vals = []
            for r in (1, 2, 3):
                path = f"{folder}/{mode}{r}-{variant}/results/{stem}_n4_2gbit.txt"
                if not (RESULTS / path).exists():
                    continue
                times = (in_place_us if column == "in" else out_of_place_us)(path)
                vals.append(pct_of_link(s, times[s], "2gbit"))
            out[(mode, s)] = statistics.mean(vals)
    return out


def t_cpu_bound():
    folder = "peers_netns_4x1_2gbit_cubic"
    series = [("gyre", "netns_gyre_tcp", "in"),
              ("Gloo allreduce_ring", "netns_gloo_allreduce_ring", "in"),
              ("Gloo ring_chunked", "netns_gloo_ring_chunked", "in"), ("torch gloo", "netns_torch_gloo", "in")]
    header = [""] + [size_label(s) for s in SIZES_4_64] + ["lost to the load"]
    rows = []
    for label, stem, col in series:
        m = busy_means(folder, "def", stem, col)
        loss = statistics.mean(m[("quiet", s)] - m[("hogs", s)] for s in SIZES_4_64)
        rows.append([label] + [f"{m[('quiet', s)]:.1f} / {m[('hogs', s)]:.1f}" for s in SIZES_4_64]
                    + [f"{loss:.2f}"])
    return header, rows, [folder]


def t_slots():
    folder = "peers_netns_4x1_2gbit_fair"
    series = [("gyre, 512 KiB slots (the default on tcp)", "def", "netns_gyre_tcp"),
              ("gyre, 128 KiB slots", "128k", "netns_gyre_tcp"),
              ("Gloo allreduce_ring", "def", "netns_gloo_allreduce_ring"),
              ("Gloo ring_chunked", "def", "netns_gloo_ring_chunked"),
              ("torch gloo", "def", "netns_torch_gloo")]
    header = ["", "quiet", "beside the busy loops", "lost to the load"]
    rows = []
    for label, variant, stem in series:
        m = busy_means(folder, variant, stem, "in")
        q = statistics.mean(m[("quiet", s)] for s in SIZES_4_64)
        h = statistics.mean(m[("hogs", s)] for s in SIZES_4_64)
        rows.append([label, f"{q:.1f}%", f"{h:.1f}%", f"{q - h:.1f}"])
    return header, rows, [folder]


def t_one_host_quiet():
    path = "spin_backoff/host_quiet.txt"
    d = {}
    for line in (RESULTS / path).read_text().splitlines():
        f = line.split()
        if len(f) == 6 and f[0].startswith("r"):
            d.setdefault((f[1], f[2], int(f[3])), []).append(float(f[5]))
    sizes = (8, 128, 512, 8192, 131072, 2 * MIB)
    header = ["size", "gyre shm", "gyre tcp loopback", "Open MPI (shared memory)"]
    rows = [[size_label(s)] + [num_range(d[k], "{:.0f}") for k in
                               (("new", "shm", s), ("new", "tcp", s), ("mpi", "default", s))]
            for s in sizes]
    return header, rows, [("spin_backoff", "host_quiet.txt")]


def shm_bind_rows(folder, label):
    raw = {}
    for line in (RESULTS / folder / "summary_raw.txt").read_text().splitlines():
        name, size, us = line.split()
        r, variant = re.match(r"r(\d+)_(.*)", name).groups()
        raw.setdefault((variant, int(size)), {})[int(r)] = float(us)
    rows = []
    for s in (MIB,):
        rounds = sorted(raw[("mpi_unbound", s)])
        best = {r: min(raw[("mpi_unbound", s)][r], raw[("mpi_bind_core", s)][r]) for r in rounds}
        med = {v: statistics.median(raw[(v, s)][r] for r in rounds)
               for v in ("gyre_unbound", "gyre_bind_core")}
        ratio = {v: statistics.median(best[r] / raw[(v, s)][r] for r in rounds)
                 for v in ("gyre_unbound", "gyre_bind_core")}
        rows.append([label, f"{med['gyre_unbound']:.0f}", f"{med['gyre_bind_core']:.0f}",
                     f"{statistics.median(best.values()):.0f}",
                     f"{ratio['gyre_bind_core']:.2f}x", f"{ratio['gyre_unbound']:.2f}x"])
    return rows


def t_shm_bind():
    runs = [("shm_1mib_vs_openmpi", "2-core VM"),
            ("shm_1mib_vs_openmpi/epyc", "EPYC, run 1"),
            ("shm_1mib_vs_openmpi/epyc/run2", "EPYC, run 2")]
    sources = ["shm_1mib_vs_openmpi", "shm_1mib_vs_openmpi/epyc"]
    header = ["1 MiB, machine", "gyre unbound", "gyre `--bind core`", "Open MPI",
              "Open MPI / gyre bound", "Open MPI / gyre unbound"]
    rows = [row for folder, label in runs for row in shm_bind_rows(folder, label)]
    return header, rows, sources


def t_ddp_bind_one_host():
    def bind_rounds(path, bind):
        rounds = {}
        for line in (RESULTS / path).read_text().splitlines():
            m = re.match(r"round (\d+) bind (\S+) (\S+) samples_per_s=(\d+)", line)
            if m and m.group(2) == bind:
                rounds.setdefault((path, int(m.group(1))), {})[m.group(3)] = float(m.group(4))
        return list(rounds.values())
    sets = []
    for folder, where, files in (("ddp_one_host_bind", "", ["runs.txt", "runs2.txt"]),
                                 ("ddp_one_host_bind/epyc", ", EPYC", ["runs.txt"])):
        for bind, label in (("none", "gyrerun"), ("core", "gyrerun `--bind core`")):
            rounds = [r for f in files for r in bind_rounds(f"{folder}/{f}", bind)]
            sets.append((label + where, rounds, "gyre"))
    torchrun = per_round(ddp_runs("gyre_bind_torchrun/runs.txt"))
    sets.append(("torchrun, EPYC", torchrun, "gyre"))
    sets.append(("torchrun `GYRE_BIND=core`, EPYC", torchrun, "gyre_bind"))
    header = ["launcher", "rounds", "gyre / gloo", "gyre / no exchange", "sync / no exchange"]
    rows = []
    for label, rounds, g in sets:
        sync = ratios(rounds, "sync", "local")
        rows.append([label, str(len(rounds)), f"{statistics.median(ratios(rounds, g, 'gloo')):.2f}",
                     f"{statistics.median(ratios(rounds, g, 'local')):.2f}",
                     f"{statistics.median(sync):.2f}" if sync else "-"])
    return header, rows, ["ddp_one_host_bind", "ddp_one_host_bind/epyc", "gyre_bind_torchrun"]


def t_hier():
    path = "sim_validation_quiet/2x4_1gbit.txt"
    by_size = {}
    for kv in compare_lines(path):
        by_size.setdefault(int(kv["bytes"]), []).append(kv)
    header = ["size", "ring", "hier", "auto (pick)", "ring / hier", "hier, % of link bound"]
    rows = []
    for s in (8, 512 * 1024, 8 * MIB, 32 * MIB):
        runs = by_size[s]
        col = {a: [float(r[f"{a}_us"]) for r in runs] for a in ("ring", "tree", "hier", "auto")}
        picks = sorted({r["auto_algo"] for r in runs})
        speedup = [float(r["ring_us"]) / float(r["hier_us"]) for r in runs]
        # each host link carries S each way: S / 125 MB/s at 1 Gbit/s
        bound = [100.0 * s / LINK_BYTES_PER_US["1gbit"] / h for h in col["hier"]]
        rows.append([size_label(s), us_range(col["ring"]), us_range(col["hier"]),
                     f"{us_range(col['auto'])} ({', '.join(picks)})", num_range(speedup, sep="-") + "x",
                     num_range(bound, "{:.0f}") + "%" if s >= 512 * 1024 else "-"])
    return header, rows, [("sim_validation_quiet", "2x4_1gbit.txt")]


def t_torch_allreduce():
    folder = "torch_backend_4ranks"
    data = read_csv(f"{folder}/allreduce.csv")
    header = ["all_reduce float32 in place"] + [size_label(int(r["size_bytes"])) for r in data]

    def times(lo, hi):
        return [us_range([float(r[lo]), float(r[hi])]) for r in data]

    def spans(lo, hi, unit):
        return [f"{r[lo]}-{r[hi]}{unit}" for r in data]
    rows = [["gyre, time per call"] + times("gyre_us_min", "gyre_us_max"),
            ["gloo, time per call"] + times("gloo_us_min", "gloo_us_max"),
            ["gyre / gloo, busbw"] + spans("busbw_ratio_min", "busbw_ratio_max", "x")]
    return header, rows, [folder]


def t_ddp_one_host():
    folder = "torch_backend_4ranks"
    header = ["model", "gyre samples/s", "gloo samples/s", "gyre / gloo", "no exchange / gloo",
              "test accuracy, gyre / gloo"]
    def sps(lo, hi):
        return f"{thousands(float(lo))}-{thousands(float(hi))}"
    rows = [[r["model"], sps(r["gyre_sps_min"], r["gyre_sps_max"]), sps(r["gloo_sps_min"], r["gloo_sps_max"]),
             f"{r['gyre_gloo_min']}-{r['gyre_gloo_max']}x", f"{r['local_gloo_min']}-{r['local_gloo_max']}x",
             f"{r['test_acc_gyre']} / {r['test_acc_gloo']}"] for r in read_csv(f"{folder}/ddp.csv")]
    return header, rows, [folder]


def ddp_row(label, model, runs):
    rounds = per_round(runs)
    gyre = [r["gyre"] for r in rounds]
    sync = ratios(rounds, "sync", "local")
    return [label, model, f"{thousands(min(gyre))}-{thousands(max(gyre))}",
            num_range(ratios(rounds, "gyre", "gloo")), num_range(ratios(rounds, "gyre", "local")),
            num_range(sync) if sync else "-"]


def t_ddp_netns():
    s = "ddp_netns_sync"
    header = ["hosts x ranks", "model", "gyre samples/s", "gyre / gloo", "gyre / no exchange",
              "sync / no exchange"]
    rows = [ddp_row("1 x 4", "MLP", ddp_runs(f"{s}/ddp1x4.txt")),
            ddp_row("1 x 2", "MLP", ddp_runs(f"{s}/ddp1x2.txt")),
            ddp_row("2 x 4, 1 Gbit/s", "MLP", ddp_runs(f"{s}/ddp2x4.txt")),
            ddp_row("2 x 4, 1 Gbit/s, CUBIC", "MLP", ddp_runs(f"{s}/ddp2x4_cubic.txt")),
            ddp_row("2 x 4, 1 Gbit/s", "LeNet-5", ddp_runs(f"{s}/ddp2x4_lenet.txt")),
            ddp_row("4 x 1, 1 Gbit/s", "MLP", ddp_runs("ddp_netns/summary_lenet_4x1_1x4.txt", "4 1 1gbit"))]
    return header, rows, ["ddp_netns_sync", ("ddp_netns", "summary_lenet_4x1_1x4.txt")]


def t_gpu():
    folder = "gpu_check_h200"
    runs = []
    for n in (1, 2, 3):
        text = (RESULTS / folder / f"run{n}_summary.txt").read_text()
        f32 = re.search(r"reduce float32 sum, % of D2D copy.*?([\d.]+) % \(copy ([\d.]+) GB/s\)", text)
        bf16 = re.search(r"reduce bfloat16 sum, % of D2D copy.*?([\d.]+) %", text)
        dev = re.search(r"device % of host.*?([\d.]+) % \(([\d.]+) vs ([\d.]+) GB/s, slice (\w+)\)", text)
        gloo = re.search(r"torch gloo on CUDA tensors\s+([\d.]+) vs ([\d.]+) GB/s", text)
        enq = re.search(r"enqueue host time, median.*?([\d.]+) us \(max ([\d.]+) us\)", text)
        runs.append(dict(f32=f"{f32.group(1)}% of {float(f32.group(2)):.0f} GB/s", bf16=f"{bf16.group(1)}%",
                         dev=f"{dev.group(2)} GB/s", host=f"{dev.group(3)} GB/s",
                         ratio=f"{dev.group(1)}%", gloo=f"{gloo.group(2)} GB/s",
                         enq=f"{enq.group(1)} us (max {enq.group(2)})"))
    labels = [("f32", "sum kernel float32, % of a D2D copy"),
              ("dev", "all-reduce 64 MiB, device buffers"), ("host", "the same, host buffers"),
              ("ratio", "device / host"), ("gloo", "torch gloo, CUDA tensors"),
              ("enq", "enqueue, host time (median)")]
    header = ["", "run 1", "run 2", "run 3"]
    rows = [[label] + [r[key] for r in runs] for key, label in labels]
    return header, rows, [folder]


def style_runs(folder):
    """(hosts x ranks label, style) -> {round: {backend: line}} of torch_styles.sh's r*.jsonl."""
    runs = {}
    for path in sorted((RESULTS / folder).glob("r*.jsonl")):
        for line in path.read_text().splitlines():
            d = json.loads(line) if line.strip() else None
            if d and not d.get("failed"):
                runs.setdefault((d["world"], d["style"]), {}).setdefault(d["round"], {})[d["backend"]] = d
    return runs


STYLE_LABELS = {"fsdp": "FSDP2", "tp": "tensor parallel", "ddp": "DDP"}


def t_torch_styles():
    sets = [("torch_styles_1host_floor", lambda w: f"1 x {w}"),
            ("torch_styles_1host", lambda w: f"1 x {w}, run 2"),
            ("torch_styles_1host/run2", lambda w: f"1 x {w}, run 3"),
            ("torch_styles_netns_2x2_1gbit", lambda w: "2 x 2, 1 Gbit/s")]
    header = ["hosts x ranks", "style", "gyre samples/s", "gloo samples/s", "gyre / gloo",
              "no communication / gloo", "step ms: gyre / gloo / none", "load"]
    rows, sources = [], []
    for folder, where in sets:
        if not (RESULTS / folder / "meta.json").exists():
            continue
        sources.append(folder)
        runs = style_runs(folder)
        for world, style in sorted(runs, key=lambda k: (k[0], list(STYLE_LABELS).index(k[1]))):
            rounds = [r for r in runs[(world, style)].values() if "gyre" in r and "gloo" in r]
            sps = {b: [r[b]["samples_per_s"] for r in rounds] for b in ("gyre", "gloo")}
            ms = {b: statistics.median(r[b]["step_ms"] for r in rounds) for b in ("gyre", "gloo")}
            ratio = [r["gyre"]["samples_per_s"] / r["gloo"]["samples_per_s"] for r in rounds]
            # fake: torch's FakeProcessGroup, the same steps without communication: the
            # most any backend could gain over gloo (bench/runs/torch_styles.sh).
            floor = [r for r in rounds if "fake" in r]
            ceiling = [r["fake"]["samples_per_s"] / r["gloo"]["samples_per_s"] for r in floor]
            none_ms = (f"{statistics.median(r['fake']['step_ms'] for r in floor):.0f}"
                       if floor else "-")
            load = [r[b]["load1"] for r in rounds for b in r]
            rows.append([where(world), STYLE_LABELS[style],
                         f"{thousands(min(sps['gyre']))}-{thousands(max(sps['gyre']))}",
                         f"{thousands(min(sps['gloo']))}-{thousands(max(sps['gloo']))}",
                         f"**{statistics.median(ratio):.2f}x** ({num_range(ratio)}, {len(rounds)} rounds)",
                         f"{statistics.median(ceiling):.2f}x ({num_range(ceiling)})" if floor else "-",
                         f"{ms['gyre']:.0f} / {ms['gloo']:.0f} / {none_ms}", num_range(load, "{:.1f}")])
    return header, rows, sources


TABLES = {
    "peers_quiet": t_peers_quiet, "peers_first": t_peers_first,
    "cpu_bound": t_cpu_bound, "slots": t_slots, "one_host_quiet": t_one_host_quiet,
    "shm_bind": t_shm_bind, "ddp_bind_one_host": t_ddp_bind_one_host,
    "hier": t_hier, "torch_allreduce": t_torch_allreduce, "ddp_one_host": t_ddp_one_host,
    "ddp_netns": t_ddp_netns, "gpu": t_gpu,
}
# docs/pytorch.md's tables (the page is edited by hand around them).
PYTORCH_TABLES = {"torch_styles": t_torch_styles}


# ---------------------------------------------------------------- docs/scaling.md

SCALING_PAGE = ROOT / "docs" / "scaling.md"
CREATION_FOLDER = "creation_scale_1host"
# rows.jsonl also holds launches of earlier gyre builds (peers gyre_main, gyre_bootstrap:
# the full mesh, see meta.json); the table shows the current one beside the peers.
CREATION_PEERS = [("gyre", "gyre"), ("gloo", "Gloo full mesh"), ("mpi", "Open MPI")]


def jsonl(path):
    return [json.loads(line) for line in (RESULTS / path).read_text().splitlines() if line.strip()]


def creation_cell(rows):
    """Median wall time of the ok launches (range when several), else the status."""
    ok = [r["wall_s"] for r in rows if r["status"] == "ok"]
    words = {"low-memory": "stopped: host memory low", "timeout": "timed out"}
    said = {words.get(r["status"], r["status"].replace("exit-", "failed, exit "))
            for r in rows if r["status"] != "ok"}
    if ok:
        text = f"{statistics.median(ok):.1f} s"
        if len(ok) > 1:
            text += f" ({min(ok):.1f}-{max(ok):.1f})"
        if said:  # a launch that did not finish is said beside those that did
            text += f"; {len(rows) - len(ok)} of {len(rows)} {', '.join(sorted(said))}"
        return text
    return ", ".join(sorted(said)) if rows else "not tried"


def creation_table(folder):
    rows = jsonl(f"{folder}/rows.jsonl")
    header = ["ranks", "peer", "8 B x 5: wall", "1 MiB x 5: wall", "fds / threads / RSS a rank"]
    out = []
    for n in sorted({r["n"] for r in rows}):
        for peer, label in CREATION_PEERS:
            mine = [r for r in rows if r["n"] == n and r["peer"] == peer]
            if not mine:
                continue
            small = [r for r in mine if r["run"] == "small"]
            big = [r for r in mine if r["run"] == "1mib"]
            sampled = [r for r in mine if r.get("rank_fds_max") is not None]
            held = "-"
            if sampled:
                held = "{:.0f} / {:.0f} / {:.0f} MiB".format(
                    max(r["rank_fds_max"] for r in sampled),
                    max(r["rank_threads_max"] for r in sampled),
                    max(r["rank_rss_mib_max"] for r in sampled))
            out.append([str(n), label, creation_cell(small), creation_cell(big), held])
    return header, out, [(folder, "rows.jsonl")]


def t_creation_scale():
    return creation_table(CREATION_FOLDER)


def t_creation_scale_4hosts():
    return creation_table("creation_scale_4hosts")


def t_join_scale():
    rows = jsonl(f"{CREATION_FOLDER}/join_scale.jsonl")
    labels = [("main", "claims read by every rank"), ("new", "claims gathered by rank 0")]
    header = ["ranks"] + [f"{text}: {what}" for _, text in labels
                          for what in ("time", "store calls", "claim reads")]
    out = []
    for n in sorted({r["n"] for r in rows}):
        line = [str(n)]
        for label, _ in labels:
            got = [r for r in rows if r["n"] == n and r["label"] == label]
            ok = [r for r in got if r["status"] == "ok"]
            if ok:
                line += [f"{statistics.median(r['seconds'] for r in ok):.2f} s",
                         thousands(statistics.median(r["store_calls"] for r in ok)),
                         thousands(statistics.median(r["claim_gets"] for r in ok))]
            else:
                line += [got[0]["status"] if got else "not run", "-", "-"]
        out.append(line)
    return header, out, [(CREATION_FOLDER, "join_scale.jsonl")]


SCALING_TABLES = {"creation_scale": t_creation_scale, "creation_scale_4hosts": t_creation_scale_4hosts,
                  "join_scale": t_join_scale}
PAGES = {PAGE: TABLES, PYTORCH_PAGE: PYTORCH_TABLES, SCALING_PAGE: SCALING_TABLES}


# ---------------------------------------------------------------- the page

def meta_of(folder, file=None):
    meta = json.loads((RESULTS / folder / "meta.json").read_text())
    for names, extra in (meta.get("files") or {}).items():
        if file and isinstance(extra, dict) and file in [n.strip() for n in names.split(",")]:
            meta = {**meta, **extra}
    return meta


def source_line(src):
    folder, file = (src, None) if isinstance(src, str) else src
    meta = meta_of(folder, file)
    shown = f"{folder}/{file}" if file else f"{folder}/"
    note = ", transcribed" if meta.get("transcribed") else ""
    commits = meta['commit']
    own = (meta.get("files") or {}).get(file) if file else None  # a file with its own run
    if meta.get("invocations") and not own:  # appended runs (APPEND=1): every commit
        commits = ", ".join(dict.fromkeys(i["commit"] for i in meta["invocations"]))
    return f"[{shown}](../bench/results/{shown}), {meta['date']}, {meta['machine']}, {commits}{note}"


def render(name, tables):
    header, rows, sources = tables[name]()
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines.append("")
    lines.append("Data: " + "; ".join(source_line(s) for s in sources) + ".")
    return lines


MARK = re.compile(r"^<!-- table: (\S+) -->$")
END = "<!-- end table -->"


def regenerate(text, tables=TABLES):
    out, lines, i, seen = [], text.splitlines(), 0, set()
    while i < len(lines):
        out.append(lines[i])
        m = MARK.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in tables:
            raise SystemExit(f"bench_tables: unknown table '{name}' (known: {', '.join(tables)})")
        seen.add(name)
        while i < len(lines) and lines[i] != END:
            i += 1
        if i == len(lines):
            raise SystemExit(f"bench_tables: table '{name}' has no '{END}'")
        out += render(name, tables)
        out.append(lines[i])
        i += 1
    missing = set(tables) - seen
    if missing:
        raise SystemExit(f"bench_tables: the page has no marker for {', '.join(sorted(missing))}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 with a diff where the page differs")
    ap.add_argument("--page", type=Path, help="only this page (its name picks its tables)")
    args = ap.parse_args()
    pages = PAGES
    if args.page:
        known = {p.name: t for p, t in PAGES.items()}
        if args.page.name not in known:
            raise SystemExit(f"bench_tables: no tables for {args.page} (pages: {', '.join(known)})")
        pages = {args.page: known[args.page.name]}
    rc = 0
    for page, tables in pages.items():
        text = page.read_text()
        new = regenerate(text, tables)
        if args.check:
            if new != text:
                sys.stdout.writelines(difflib.unified_diff(
                    text.splitlines(True), new.splitlines(True), str(page), "from bench/results"))
                print(f"bench_tables: {page} differs from bench/results; run tools/bench_tables.py")
                rc = 1
        elif new != text:
            page.write_text(new)
    return rc


if __name__ == "__main__":
    sys.exit(main())
