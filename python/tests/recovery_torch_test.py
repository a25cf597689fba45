#!/usr/bin/env python3
"""A plain torch DDP script survives a rank's death under gyrerun --elastic, 10 times of 10.

    recovery_torch_test.py --gyrerun build/bin/gyrerun [--runs 10] [--launchers]

Runs python/examples/elastic_ddp_train.py (torch >= 2.15: shrink_group) on backend gyre
with 4 ranks under `gyrerun --elastic --max-restarts 1`, --runs times, each killing one
rank (os._exit(1)) at a step of the training: ranks 1, 2 and 3 in turn (rank 0 serves
torch's store under gyrerun, and no rank survives its death), at steps 3 to 8 in turn.
Each run must: exit 0; report one shrink that names the killed rank and one grow back
to 4 ranks (the rank gyrerun restarted, taken in); end with bit-identical parameters on
every rank, and those within rtol 1e-4 of the same training in this process alone
(every step applied once, on the same samples, whatever the world); leave no process of
the run behind. Every run is bounded (90 s, then its process group is killed and the run
fails). Prints each run's times: the error on rank 0 and the kill to the first operation
on the shrunk group, the shrink, the grow.

--launchers: instead, runs the same kill once under each launcher at hand (torchrun,
with and without --max-restarts and with a long --monitor-interval;
torch.distributed.launch; mp.spawn joined by torch and joined by hand; gyrerun plain and
--elastic; mpirun, and srun where SLURM_CONF names a cluster such as
tools/slurm_local.sh's) and prints what happened to the survivors: the table in
docs/pytorch.md.
Exit 77 where torch has no shrink_group or gyrerun is not given.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "examples", "elastic_ddp_train.py")
WORLD = 4
RUN_LIMIT_S = 90
STEPS, BATCH, LR, SAMPLES = 30, 24, 0.05, 960  # elastic_ddp_train.py's defaults but --steps


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers():
    """Processes still running the training script (this test's only: its path)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True,
                         timeout=10).stdout
    return [line.strip() for line in out.splitlines() if "elastic_ddp_train.py" in line]


def run(cmd, env=None, limit=RUN_LIMIT_S):
    """cmd in its own process group; (rc, stdout, stderr, seconds). rc None: killed at
    the limit."""
    began = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        rc = None
    # Whatever the launcher left in its group (it should have left nothing).
    try:
        os.killpg(p.pid, 0)
        stray = True
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        stray = False
    return rc, out, err, time.monotonic() - began, stray


def report_of(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def train_args(kill_rank=-1, kill_step=-1, steps=STEPS, extra=()):
    return [TRAIN, "--steps", str(steps), "--kill-rank", str(kill_rank),
            "--kill-step", str(kill_step), *extra]


def elastic(gyrerun, py, *targs):
    return [gyrerun, "--elastic", "--max-restarts", "1", "-n", str(WORLD), py, *targs]


def reference_params(steps):
    """The training of elastic_ddp_train.py in this one process on each step's whole
    batch: what DDP computes at any world size that divides the batch (the mean of the
    ranks' mean gradients is the batch's mean gradient), up to rounding."""
    sys.path.insert(0, os.path.dirname(TRAIN))
    import elastic_ddp_train as t
    sys.path.pop(0)
    net = t.make_model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    data = t.dataset(SAMPLES)
    for step in range(steps):
        x, y = t.shard(data, step, BATCH, 0, 1)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return t.flat_params(net)


def recovery_runs(gyrerun, py, runs):
    reference = reference_params(STEPS)
    passed = 0
    first_ops, total = [], 0.0
    for i in range(runs):
        victim, step = 1 + i % (WORLD - 1), 3 + i % 6
        rc, out, err, secs, stray = run(elastic(gyrerun, py, *train_args(
            victim, step, extra=("--wait-for-newcomers", "60"))))
        total += secs
        rep = report_of(out)
        problems = []
        if rc != 0:
            problems.append("killed at the limit" if rc is None else f"exit {rc}")
        if rep is None:
            problems.append("no report")
        else:
            kinds = [e["kind"] for e in rep["events"]]
            shrinks = [e for e in rep["events"] if e["kind"] == "shrink"]
            if kinds != ["shrink", "grow"]:
                problems.append(f"events {kinds}, expected a shrink and then a grow")
            if shrinks and (shrinks[0]["dead"] != victim or shrinks[0]["world"] != WORLD - 1):
                problems.append(f"the shrink named rank {shrinks[0]['dead']} (world "
                                f"{shrinks[0]['world']}), killed rank {victim}")
            if rep["world_end"] != WORLD:
                problems.append(f"{rep['world_end']} ranks at the end")
            if not rep["identical"]:
                problems.append("the ranks' parameters differ")
            params = torch.tensor(rep["params"], dtype=torch.float32)
            if not torch.allclose(params, reference, rtol=1e-4, atol=1e-6):
                diff = (params - reference).abs().max().item()
                problems.append(f"parameters differ from the run without a failure by "
                                f"{diff:.3g}")
        if "restarts as a newcomer" not in err:
            problems.append("gyrerun did not restart the killed rank")
        if stray:
            problems.append("processes left in the launcher's process group")
        left = leftovers()
        if left:
            problems.append(f"processes left: {left}")
            for line in left:
                try:
                    os.kill(int(line.split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        times = ""
        if rep and rep["events"]:
            ev = {e["kind"]: e for e in rep["events"]}
            if "shrink" in ev:
                sh = ev["shrink"]
                first_ops.append((sh["fail_to_first_op_ms"],
                                  sh.get("kill_to_first_op_ms", -1)))
                times = (f"error -> first op on the shrunk group "
                         f"{sh['fail_to_first_op_ms']:.0f} ms "
                         f"(shrink {sh['shrink_ms']:.0f} ms), "
                         f"kill -> first op "
                         f"{sh.get('kill_to_first_op_ms', -1):.0f} ms")
            if "grow" in ev:
                times += f", grow {ev['grow']['grow_ms']:.0f} ms"
        print(f"run {i + 1}: kill rank {victim} at step {step}: "
              f"{'ok' if not problems else 'FAIL: ' + '; '.join(problems)}; {times}; "
              f"{secs:.1f} s", flush=True)
        if problems:
            print(err[-4000:])
        else:
            passed += 1
    if first_ops:
        for i, what in ((0, "the error on rank 0"), (1, "the kill")):
            ms = sorted(f[i] for f in first_ops)
            print(f"{what} -> first op on the shrunk group: median {ms[len(ms) // 2]:.0f} ms, "
                  f"worst {ms[-1]:.0f} ms")
    print(f"{total:.0f} s for {runs} runs")
    print(f"{passed} of {runs} runs shrank, grew back and finished")
    print("PASS" if passed == runs else "FAIL")
    return 0 if passed == runs else 1


# --launchers: the same kill under each launcher. The survivors train on for about
# 3 s after the kill (--step-sleep), longer than torchrun's 0.1 s monitor interval and
# gyrerun's 3 s grace.
SPAWN = r"""
import os, runpy, sys, datetime
import torch.distributed as dist
import torch.multiprocessing as mp
def rank_main(rank, argv):
    os.environ.update(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank))
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
if __name__ == "__main__":
    argv = sys.argv[2:]
    if sys.argv[1] == "join":
        mp.spawn(rank_main, args=(argv,), nprocs=4, join=True)
    else:  # join by hand: every process, whatever the others did
        ctx = mp.spawn(rank_main, args=(argv,), nprocs=4, join=False)
        codes = []
        for p in ctx.processes:
            p.join(120)
            codes.append(p.exitcode)
        print("exit codes", codes, file=sys.stderr)
        sys.exit(0 if codes.count(0) == 3 else 1)
"""


def launcher_table(gyrerun, py):
    targs = train_args(2, 5, steps=35, extra=("--step-sleep", "0.1"))
    spawn = os.path.join(tempfile.mkdtemp(prefix="recovery_spawn."), "spawn_train.py")
    with open(spawn, "w") as f:
        f.write(SPAWN)
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
    rows = [
        ("torchrun", [*torchrun, *targs]),
        ("torchrun --max-restarts 1", [*torchrun, "--max-restarts", "1", *targs]),
        ("torchrun --monitor-interval 30", [*torchrun, "--monitor-interval", "30", *targs]),
        ("python -m torch.distributed.launch --use-env",
         [py, "-m", "torch.distributed.launch", "--standalone", "--use-env",
          "--nproc-per-node", "4", *targs]),
        ("mp.spawn(join=True)", [py, spawn, "join", *targs]),
        ("mp.spawn(join=False), each process joined", [py, spawn, "nojoin", *targs]),
    ]
    if gyrerun:
        rows += [
            ("gyrerun", [gyrerun, "-n", "4", py, *targs]),
            ("gyrerun --elastic --max-restarts 0",
             [gyrerun, "--elastic", "--max-restarts", "0", "-n", "4", py, *targs]),
            ("gyrerun --elastic --max-restarts 1", elastic(
                gyrerun, py, *targs, "--wait-for-newcomers", "60")),
        ]
    # Open MPI and Slurm (tools/slurm_local.sh; SLURM_CONF set) where at hand: their
    # ranks map their variables onto torch's.
    mapped = ("export RANK=${OMPI_COMM_WORLD_RANK:-$SLURM_PROCID} WORLD_SIZE=4; "
              f"exec {py} " + " ".join(targs))
    if shutil.which("mpirun"):
        rows.append(("mpirun", ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "4",
                                "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "PYTHONPATH",
                                "bash", "-c", mapped]))
    if shutil.which("srun") and os.environ.get("SLURM_CONF"):
        rows.append(("srun", ["srun", "-n", "4", "--export=ALL", "bash", "-c", mapped]))
    print("| launcher | exit | survivors | replacement | seconds |")
    print("|---|---|---|---|---|")
    for name, cmd in rows:
        rc, out, err, secs, stray = run(cmd, env=env, limit=120)
        rep = report_of(out)
        if rep is None:
            survivors = "stopped before the end"
            for sig in ("SIGTERM", "Signals.SIGTERM", "signal 15", "exitcode: -15"):
                if sig in err:
                    survivors = "stopped by SIGTERM before the end"
                    break
        elif rep["restart_count"] > 0:
            survivors = "stopped; the whole group restarted from step 0"
        else:
            ev = [e["kind"] for e in rep["events"]]
            survivors = f"shrank and finished ({', '.join(ev) or 'no change'})"
        replacement = "none"
        if rep and rep["restart_count"] > 0:
            replacement = f"all {WORLD} ranks restarted"
        elif "restarts as a newcomer" in err:
            replacement = "the dead rank, taken back in" if rep and rep["world_end"] == WORLD \
                else "the dead rank, not taken in"
        print(f"| {name} | {rc} | {survivors} | {replacement} | {secs:.1f} |", flush=True)
        if os.environ.get("RECOVERY_VERBOSE"):
            print(err[-3000:])
        left = leftovers()
        if left:
            print(f"processes left after {name}: {left}")
    os.remove(spawn)
    os.rmdir(os.path.dirname(spawn))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gyrerun", default="")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--launchers", action="store_true")
    args = p.parse_args()
    import gyre_torch
    if not hasattr(dist, "shrink_group") or not gyre_torch._C.supports_shrinking:
        print(f"SKIPPED: torch {torch.__version__} has no shrink_group (torch >= 2.15)")
        return 77
    if args.launchers:
        return launcher_table(args.gyrerun, sys.executable)
    if not args.gyrerun:
        print("SKIPPED: recovery_torch_test needs gyrerun (--gyrerun PATH)")
        return 77
    return recovery_runs(args.gyrerun, sys.executable, args.runs)


if __name__ == "__main__":
    sys.exit(main())
