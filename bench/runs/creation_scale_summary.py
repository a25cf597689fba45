#!/usr/bin/env python3
"""Prints the tables of bench/results/creation_scale_1host/ as docs/scaling.md shows them
(tools/bench_tables.py makes both): creation per peer and rank count, and the join alone.

  bench/runs/creation_scale_summary.py
"""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)

for name in tables.SCALING_TABLES:
    print(f"## {name}\n")
    print("\n".join(tables.render(name, tables.SCALING_TABLES)))
    print()
