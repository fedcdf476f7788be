"""The run API called from several threads at once (a logging thread beside the loop, a
callback of a framework's): one call at a time, so the history's lines never interleave, the
steps stay in order and a step's fields logged by two threads both land in its line."""

from __future__ import annotations

import sys
import threading

import orjson

from rundir import open_run
from rundir.layout import LOSS_JSON

STEPS = 2000


def test_two_threads_logging_at_once_lose_nothing_and_keep_the_order(tmp_path):
    run_dir, errors = tmp_path / "x", []
    barrier = threading.Barrier(2)

    def loop(key: str) -> None:
        try:
            for step in range(1, STEPS + 1):
                barrier.wait()                  # both threads at the same step, at once
                run.log(step, **{key: float(step)})
        except Exception as err:                # noqa: BLE001  (said by the assertion below)
            errors.append(repr(err))
            barrier.abort()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                 # a thread switch at almost any bytecode
    try:
        with open_run(run_dir) as run:
            threads = [threading.Thread(target=loop, args=(key,)) for key in ("a", "b")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    lines = [orjson.loads(line) for line in (run_dir / LOSS_JSON).read_bytes().splitlines()]   # none cut
    steps = [line["step"] for line in lines if "event" not in line]
    assert steps == sorted(steps)
    newest = {line["step"]: line for line in lines if "event" not in line}
    assert sorted(newest) == list(range(1, STEPS + 1))
    assert [s for s, line in newest.items() if not {"a", "b"} <= line.keys()] == []    # both fields, every step
