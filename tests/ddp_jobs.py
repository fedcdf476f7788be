"""A job of several processes under torchrun (gloo on CPU), or one process, started by a test: every wait is
bounded by its event with a ceiling, and a job that does not get there fails the test with the
ranks' Python stacks (each worker registers ``faulthandler`` on SIGUSR2; the job sends it,
then reads the dump from the job's output)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil

ROOT = Path(__file__).resolve().parents[1]
CEILING_S = 60.0
DUMP_HEADER = "Current thread "     # faulthandler's line before the stack of the thread it interrupted


class Job:
    """A command's processes (``torchrun ...`` or one ``python`` process), its output in ``out``."""

    def __init__(self, cmd: list[str], out: Path):
        self.out = out
        self._fh = open(out, "wb")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
        self.proc = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                     start_new_session=True)

    def workers(self) -> dict[int, psutil.Process]:
        """The live workers by global rank (from their environment)."""
        found: dict[int, psutil.Process] = {}
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return found
        if not children:
            return {0: psutil.Process(self.proc.pid)} if self.proc.poll() is None else found
        for child in children:
            try:
                rank = child.environ().get("RANK")
            except psutil.Error:
                continue
            if rank is not None and rank.isdigit():
                found[int(rank)] = child
        return found

    def output(self) -> str:
        self._fh.flush()
        return self.out.read_text(errors="replace")

    def stuck(self, what: str) -> AssertionError:
        """The job did not get to ``what``: every worker's stacks, then the job's output, as the failure."""
        dumps = self.output().count(DUMP_HEADER)
        for worker in self.workers().values():
            try:
                worker.send_signal(signal.SIGUSR2)
                dumps += 1
            except psutil.Error:
                pass
        # faulthandler writes a dump at once, but a loaded machine may not run the worker for
        # seconds: wait for every dump's header, then for the output to stop growing.
        deadline = time.monotonic() + CEILING_S
        seen = ""
        while time.monotonic() < deadline:
            text = self.output()
            if text.count(DUMP_HEADER) >= dumps and text == seen:
                break
            seen = text
            time.sleep(0.2)
        return AssertionError(f"the job did not get to {what} within its bound; its output, with the ranks' "
                              f"stacks (SIGUSR2):\n{self.output()[-12000:]}")

    def until(self, condition: Callable[[], bool], what: str, timeout: float = CEILING_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"the job exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.output()[-12000:]}")
            if time.monotonic() > deadline:
                raise self.stuck(what)
            time.sleep(0.1)

    def wait(self, what: str, timeout: float = CEILING_S) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise self.stuck(what) from None

    def close(self) -> None:
        for worker in self.workers().values():
            try:
                worker.kill()
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._fh.close()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def torchrun(script: Path, *args: str, out: Path, nproc: int = 2) -> Job:
    """``torchrun --standalone --nproc_per_node NPROC SCRIPT ARGS...`` (gloo on CPU)."""
    return Job([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script),
                *args], out)


def python(script: Path, *args: str, out: Path) -> Job:
    """``python SCRIPT ARGS...``: one process."""
    return Job([sys.executable, str(script), *args], out)
