"""``make bench``: every benchmark in bench/, printed as one table of ratios.

Each ``bench/bench_*.py`` module exposes ``run() -> list[Result]``. A result compares a
measurement with a baseline taken in the same process (or the same run), because these
machines are noisy: the ratio is what is reported and what the targets are about.
Each module runs in a process of its own, so that none measures in a process another has
changed (the trainer's imports torch and starts its threads; the console never does).
Run one module with ``python -m bench history``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench
from bench.common import Result, print_table

ONE = "--one"        # internal: run one module here, print its results as JSON
MARK = "bench results: "     # the line of JSON among whatever else the module's processes print
ROOT = Path(bench.__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    names = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    results: list[Result] = []
    for name in wanted:
        started = time.perf_counter()
        print(f"# {name} ...", file=sys.stderr, flush=True)
        # A cache of its own (the history mirrors the console writes), never the user's.
        with tempfile.TemporaryDirectory(prefix="andrea-bench-cache-") as cache:
            out = subprocess.run([sys.executable, "-m", "bench", ONE, name], stdout=subprocess.PIPE, text=True,
                                 cwd=ROOT, env={**os.environ, "ANDREA_CACHE_DIR": cache})
        if out.returncode != 0:
            print(f"# {name}: failed with exit status {out.returncode}", file=sys.stderr)
            return 1
        lines = out.stdout.splitlines()
        # A terminal program run headless may leave its escape codes before the mark.
        sys.stderr.writelines(line + "\n" for line in lines if MARK not in line)
        results.extend(Result(**fields) for fields in json.loads(next(
            line.split(MARK, 1)[1] for line in reversed(lines) if MARK in line)))
        print(f"# {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print_table(results)
    return 0 if all(r.met is not False for r in results) else 1


def run_one(name: str) -> int:
    results = importlib.import_module(f"bench.bench_{name}").run()
    print(MARK + json.dumps([dataclasses.asdict(r) for r in results]), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [ONE]:
        sys.exit(run_one(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
