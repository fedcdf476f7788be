"""A run watched as people watch one from a laptop: its directory mounted with sshfs (default
options: listings cached for 20 s) over an sshd on 127.0.0.1, a real trainer checkpointing
every second or two and pruning to the last two. The checkpoints are known from the trainer's
history, each confirmed by opening it: the newest is shown within a bound of landing, and a
pruned one the cached listing still names is gone, never invalid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.widgets import StatusPane
from rundir import LossHistory, verify_trainer
from rundir.layout import LOSS_JSON, is_checkpoint_bin, sidecar_name
from tests.console.conftest import until
from tests.console.trainer_proc import ROOT, train_command
from tests.mounts import sshfs

SIZE = (120, 40)
# The newest checkpoint is shown this long after it landed, at the latest: the poll is 1 s and a
# loaded machine adds seconds (3.2 s at a load average of 10), well under the 20 s for which the
# mount serves a cached listing, which is what this bound tells apart.
SHOWN_WITHIN_S = 10.0


def newest_landed(run: Path) -> int:
    """The newest complete checkpoint's step, as the trainer's own side of the mount has it."""
    steps = [int(n[5:-4]) for n in os.listdir(run) if is_checkpoint_bin(n) and (run / sidecar_name(n)).exists()]
    return max(steps, default=-1)


def shown_newest(app: ConsoleApp) -> int:
    snap = app.snapshot
    complete = [c.step for c in snap.checkpoints if c.status == "complete"] if snap is not None else []
    return max(complete, default=-1)


class CheckpointingTrainer:
    """The trainer, a checkpoint every ``every`` steps, the last two kept."""

    def __init__(self, run: Path, every: int = 200):
        self.run, self.log = run, open(run.parent / "trainer.out", "ab")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(train_command(run, "--checkpoint-every", str(every), "--keep-last", "2"),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                     cwd=ROOT)
        deadline = time.monotonic() + 60
        while not (verify_trainer(run).ok and newest_landed(run) >= 0):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        return (self.run.parent / "trainer.out").read_text(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.mark.asyncio
async def test_checkpoints_through_sshfs_defaults_shown_in_time_and_a_pruned_one_never_invalid(tmp_path):
    node = tmp_path / "node" / "run"
    node.parent.mkdir(parents=True)
    with sshfs(node.parent, tmp_path / "laptop") as laptop:
        trainer = CheckpointingTrainer(node)
        try:
            run = laptop / "run"
            app = ConsoleApp(run, ConsoleOptions(tick=0.5))
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: "dir_cache=no" in app.dashboard.query_one(StatusPane)._shown,
                            timeout=60, what="the status saying the mount caches listings")
                lags, invalid = [], set()
                for _ in range(5):
                    step = newest_landed(node)
                    await until(pilot, lambda: newest_landed(node) > step, timeout=60, what="a new checkpoint landing",
                                detail=trainer.output)
                    landed, at = newest_landed(node), time.monotonic()
                    while shown_newest(app) < landed and time.monotonic() - at < 60:
                        invalid |= {c.path.name for c in app.snapshot.checkpoints if c.status == "invalid"}
                        await pilot.pause(0.05)
                    lags.append(time.monotonic() - at)
                    assert shown_newest(app) >= landed, f"step {landed} not shown after 60 s"
                assert not invalid, f"checkpoints called invalid: {invalid}"
                assert max(lags) <= SHOWN_WITHIN_S, f"the newest checkpoint shown after {lags} s"
            for _ in range(3):      # a pruned checkpoint the cached listing still names is gone, never invalid
                check = subprocess.run([sys.executable, "-m", "console", str(run), "--check"], cwd=ROOT,
                                       capture_output=True, text=True, timeout=120)
                assert "invalid" not in check.stdout + check.stderr, check.stdout + check.stderr
                time.sleep(1.0)
            assert len([n for n in os.listdir(node) if is_checkpoint_bin(n)]) <= 3, "keep_last 2 did not prune"
        finally:
            trainer.close()


def signal_answers(run: Path) -> list[str]:
    """The checkpoints that answered a checkpoint signal, by the trainer's own history
    (docs/contract.md's `signal` event): the one whose write the signal came during, else the
    next one (a signal at a cadence step is answered by that step's "cadence" checkpoint)."""
    history = LossHistory(run / LOSS_JSON)   # all of it: a loaded machine trains past a tail's worth meanwhile
    history.refresh()
    events = history.events
    answers, before, waiting = [], None, False
    for ev in events:
        if ev.event == "checkpoint":
            if waiting:
                answers.append(ev.data["path"])
            before, waiting = ev.data["path"], False
        elif ev.event == "signal" and ev.data.get("action") == "checkpoint":
            if ev.data.get("during_checkpoint") and before is not None:
                answers.append(before)
            else:
                waiting = True
    return answers


def test_checkpoint_and_stop_through_sshfs_on_the_same_host_name_the_answer(tmp_path):
    """The trainer is on this host, its directory reached through the mount under another path,
    device and inode numbers: it is this run's trainer all the same (a probe file shows the
    directory it holds is this one), so ``--checkpoint`` and ``--stop`` work, and the landing
    said is the checkpoint that answered the request, never a scheduled one."""
    node = tmp_path / "node" / "run"
    node.parent.mkdir(parents=True)
    with sshfs(node.parent, tmp_path / "laptop") as laptop:
        trainer = CheckpointingTrainer(node, every=150)
        try:
            run = laptop / "run"
            for _ in range(2):
                asked = subprocess.run([sys.executable, "-m", "console", str(run), "--checkpoint"], cwd=ROOT,
                                       capture_output=True, text=True, timeout=120)
                said = asked.stdout + asked.stderr
                assert asked.returncode == 0, said
                answers = signal_answers(node)
                assert answers and f"checkpoint landed: {answers[-1]}" in said, (said, answers)
            stop = subprocess.run([sys.executable, "-m", "console", str(run), "--stop"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)
            assert stop.returncode == 0, stop.stdout + stop.stderr
            assert trainer.proc.wait(60) == 0, trainer.output()
        finally:
            trainer.close()
