"""``make bench``: every benchmark in bench/, printed as one table of ratios.

Each ``bench/bench_*.py`` module exposes ``run() -> list[Result]``. A result compares a
measurement with a baseline taken in the same process (or the same run), because these
machines are noisy: the ratio is what is reported and what the targets are about.
Run one module with ``python -m bench history``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench
from bench.common import Result, print_table


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
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"# {name} ...", file=sys.stderr, flush=True)
        results.extend(module.run())
        print(f"# {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print_table(results)
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
