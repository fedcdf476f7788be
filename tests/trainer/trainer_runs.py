"""Helpers of the trainer tests: real run directories with small text arms, real processes.

Run directories with generated *histories* come from tests/rundirs.py; these are the
inputs of a real trainer (a micro run.toml and three small deterministic text files),
so that a process starts in about a second instead of reading the standard library.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from rundir import RunConfig, write_run_config
from rundir.config import ArmConfig

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("the", "model", "loss", "step", "def", "return", "self", "arm", "data", "token", "print", "for",
         "in", "range", "if", "else", "import", "class", "value", "batch", "(", ")", ":", "=", ",")


def arm_text(seed: int, size: int) -> str:
    """Deterministic pseudo-text of about ``size`` bytes."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size] + "\n"


def make_trainer_run(root: Path, arms: dict[str, int] | None = None, **run: Any) -> Path:
    """A micro run.toml whose arms are text files ``data/NAME.txt`` (name -> bytes)."""
    arms = arms or {"prose": 6000, "code": 5000, "notes": 4000}
    run.setdefault("state_every", 5)        # a rename per step is a tenth of a micro step
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    for seed, (name, size) in enumerate(arms.items()):
        (root / "data" / f"{name}.txt").write_text(arm_text(seed, size))
    config = RunConfig.from_preset("micro", name=root.name, **run)
    config.arms = {name: ArmConfig(source=f"data/{name}.txt", cap=0.8, floor=0.1) for name in arms}
    config.samples.max_new_tokens = 8
    write_run_config(root, config)
    return root


def trainer_cmd(run_dir: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "trainer", str(run_dir), *flags]


def run_trainer(run_dir: Path, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m trainer RUN_DIR FLAGS`` to completion."""
    return subprocess.run(trainer_cmd(run_dir, *flags), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_trainer(run_dir: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(trainer_cmd(run_dir, *flags), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (the timeout only guards a hang)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def history(run_dir: Path) -> list[dict[str, Any]]:
    """Every whole line of ``.loss.json``."""
    path = run_dir / ".loss.json"
    if not path.exists():
        return []
    data = path.read_bytes()
    return [orjson.loads(line) for line in data[:data.rfind(b"\n") + 1].splitlines() if line]


def step_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in history(run_dir) if "event" not in r]


def events(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [r for r in history(run_dir) if r.get("event") == name]


def without_time(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k != "time"} for line in lines]


def snapshot(run_dir: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``run_dir``: (size, mtime_ns, sha256), to prove nothing changed."""
    out = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(run_dir))] = (st.st_size, st.st_mtime_ns,
                                                  hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def stop_cleanly(proc: subprocess.Popen) -> str:
    """SIGTERM a trainer that must still be running and wait for it; returns its stderr
    (the caller asserts the exit status)."""
    assert proc.poll() is None, "the trainer exited before it was stopped"
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)[1]


def stop_process(proc: subprocess.Popen) -> None:
    """Test teardown: SIGTERM a trainer we started, if still running, and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
