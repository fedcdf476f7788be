"""A real ``andrea-train --preset micro`` subprocess for the console's live tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rundir import verify_trainer

ROOT = Path(__file__).resolve().parents[2]


def train_command(run_dir: Path, *extra: str) -> list[str]:
    exe = Path(sys.executable).with_name("andrea-train")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainer"]
    # No cadence checkpoint within a test's lifetime: every checkpoint seen is one a key asked for.
    return [*base, str(run_dir), "--preset", "micro", "--checkpoint-every", "100000", "--threads", "1", *extra]


class Trainer:
    """Starts the trainer in its own session and waits until its record verifies."""

    def __init__(self, run_dir: Path, *extra: str):
        self.run_dir = run_dir
        self.log = open(run_dir.parent / f"{run_dir.name}.out", "ab")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(train_command(run_dir, *extra), stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env, cwd=ROOT)

    def wait_verified(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"trainer exited early with {self.proc.returncode}: {self.output()}")
            if verify_trainer(self.run_dir).ok and (self.run_dir / ".loss.json").exists():
                return
            time.sleep(0.1)
        raise AssertionError(f"trainer not verified after {timeout} s: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        return (self.run_dir.parent / f"{self.run_dir.name}.out").read_text(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> "Trainer":
        self.wait_verified()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
