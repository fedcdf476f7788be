"""The guided rollback against a real micro trainer whose loss the test-only fault hook
multiplies for a few steps: the console finds the spike, ``--rollback --yes`` resumes from
the checkpoint before it with skipped batches, and the history shows both segments; a
rollback killed after the stop is completed by the next ``--rollback``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rundir import LossHistory, list_checkpoints, load_run_config, verify_trainer, write_run_config
from rundir.layout import LOSS_JSON, ROLLBACK_RECORD, checkpoint_name
from rundir.rollback_files import STAGES, read_rollback_journal
from tests.console.test_pivot_live import history, wait_for
from tests.console.trainer_proc import ROOT
from tests.processes import stop_processes_naming
from tests.trainer.trainer_runs import make_trainer_run, trainer_cmd
from trainer.faults import LOSS_FAULT_ENV

CONSOLE = [sys.executable, "-m", "console"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
FAULT = (60, 3, 8.0)              # steps 60-62 at 8x their loss
SPIKE_START, SPIKE_END = FAULT[0], FAULT[0] + FAULT[1] - 1
CADENCE, MARGIN = 20, 10          # the checkpoint before the spike by the margin: step 40
# The spike's W and k. The 8x steps stand about 300 MADs above their baseline; with k = 10 this
# micro run's own blips of 20% flag too (steps 1,425 and 1,427, then 3,154 and 3,166: the trainer
# is deterministic), and a loaded machine that trained that far rolled back past them instead.
# Over 6,000 steps none of them reaches 15 MADs.
WINDOW, K = 20, 50.0


def steps(run: Path) -> list[dict]:
    return [r for r in history(run) if "event" not in r]


@pytest.fixture
def spiky_run(tmp_path):
    """A live trainer past a spike at steps 60-62, checkpointing every 20 steps."""
    run = make_trainer_run(tmp_path / "spiky", checkpoint_every=CADENCE, sample_every=1000,
                           keep_last=0)          # the default keeps 5: step 40 would be pruned by then
    config = load_run_config(run)
    config.alerts.window, config.alerts.k, config.alerts.rollback_margin = WINDOW, K, MARGIN
    write_run_config(run, config)
    env = {**ENV, LOSS_FAULT_ENV: ":".join(map(str, FAULT))}
    subprocess.Popen(trainer_cmd(run), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                     env=env, cwd=ROOT)
    wait_for(lambda: verify_trainer(run).ok and len(steps(run)) >= SPIKE_END + 25, 120, "steps past the spike")
    yield run
    stop_processes_naming(run)


def check_rolled_back(run: Path, archive: str, before: bytes) -> dict:
    """Everything a completed rollback to step 40 promises; returns the rollback event."""
    x = 40
    assert (run / LOSS_JSON).read_bytes().startswith(before), "the history before the rollback was changed"
    records = history(run)
    idx = next(i for i, r in enumerate(records) if r.get("event") == "rollback" and r.get("archive") == archive)
    event = records[idx]
    assert event["step"] == event["to_step"] == x and event["skip_batches"] == SPIKE_END - x
    assert event["spike"]["start"] == SPIKE_START and event["spike"]["end"] == SPIKE_END
    old = {r["step"]: r for r in records[:idx] if "event" not in r}
    assert event["from_step"] == max(old) and max(old) > SPIKE_END
    resume = next(r for r in reversed(records[:idx]) if r.get("event") == "resume")
    assert resume["from_step"] == x and resume["skip_batches"] == SPIKE_END - x
    # The new segment: steps from X + 1 again, on other batches, and no spike this time.
    wait_for(lambda: any(r.get("step") == SPIKE_END + 5 and "event" not in r for r in history(run)[idx:]),
             120, "the new segment past the spike's steps")
    new = {r["step"]: r for r in history(run)[idx:] if "event" not in r}
    assert min(new) == x + 1 and new[x + 1]["loss"] != old[x + 1]["loss"]
    assert max(new[s]["loss"] for s in range(SPIKE_START, SPIKE_END + 1)) < \
        min(old[s]["loss"] for s in range(SPIKE_START, SPIKE_END + 1)) / 3
    # The reader keeps both: the newest line per step, the abandoned ones beside them.
    reread = LossHistory(run / LOSS_JSON)
    reread.refresh()
    assert [e.data["to_step"] for e in reread.events if e.event == "rollback"] == [x]
    # Checkpoints after X are set aside, the stopped trainer's final one among them.
    record = orjson.loads((run / archive / ROLLBACK_RECORD).read_bytes())
    assert record["stage"] == "resumed" and record["to_step"] == x
    assert record["final_step"] in record["set_aside"] and all(s > x for s in record["set_aside"])
    assert (run / archive / checkpoint_name(record["final_step"])).exists()
    assert read_rollback_journal(run) == (None, None) and verify_trainer(run).ok
    assert all(c.step <= x or c.mtime > record["started"] for c in list_checkpoints(run))
    return event


def test_rollback_cli_goes_back_past_the_spike(spiky_run):
    run = spiky_run
    spike = subprocess.run([*CONSOLE, str(run), "--rollback", "--timeout", "120"], capture_output=True, text=True,
                           env=ENV, cwd=ROOT, timeout=120)
    assert spike.returncode == 1 and "cancelled: nothing changed" in spike.stderr       # asked, not confirmed
    assert f"the newest spike starts at step {SPIKE_START}" in spike.stdout
    assert "roll back to step_000040.bin" in spike.stdout and verify_trainer(run).ok
    before = (run / LOSS_JSON).read_bytes()
    out = subprocess.run([*CONSOLE, str(run), "--rollback", "--yes", "--timeout", "120"], capture_output=True,
                         text=True, env=ENV, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    for key in ("plan", "1", "2", "3"):
        assert any(line.startswith(f"[{key}]") for line in lines), key
    assert f"each arm skipping its next {SPIKE_END - 40} batches" in out.stdout
    archive = lines[-1].rsplit("checkpoints after it in ", 1)[1].rstrip("/")
    check_rolled_back(run, archive, before)


def test_rollback_killed_after_the_stop_is_completed_by_the_next(spiky_run):
    run = spiky_run
    before = (run / LOSS_JSON).read_bytes()
    console = subprocess.Popen([*CONSOLE, str(run), "--rollback", "--yes"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)

    def stopped() -> bool:
        journal, _ = read_rollback_journal(run)
        return journal is not None and STAGES.index(journal.stage) >= STAGES.index("stopped")

    wait_for(lambda: stopped() or console.poll() is not None, 120, "the stop step")
    console.kill()
    console.wait()
    journal, _ = read_rollback_journal(run)
    # Killed at the stop or a little later (the kill lands when the journal is seen): the
    # stopped trainer's final checkpoint is kept, here or set aside.
    assert journal is not None and journal.stage != "resumed", "the rollback finished before it could be killed"
    # (a kill in the middle of the set-aside leaves some moved, the archive named in the journal).
    final = checkpoint_name(journal.final_step)
    assert (run / final).exists() or (journal.archive and (run / journal.archive / final).exists())
    out = subprocess.run([*CONSOLE, str(run), "--rollback", "--yes", "--timeout", "120"], capture_output=True,
                         text=True, env=ENV, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"completing the interrupted rollback to step 40 (last completed stage: {journal.stage})" in out.stdout
    archive = out.stdout.splitlines()[-1].rsplit("checkpoints after it in ", 1)[1].rstrip("/")
    check_rolled_back(run, archive, before)
