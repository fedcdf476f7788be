"""The Lightning and Hugging Face examples, real frameworks on CPU, operated by the console's
command line: their loss is read, ``--checkpoint`` (the dashboard's c) makes the framework
write a checkpoint that lands and is listed, ``--stop`` (s) stops the run cleanly, exit 0."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir import verify_trainer
from rundir.layout import LOSS_JSON, TRAINER_LOG

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
EXAMPLES = {"lightning": "lightning_module.py", "transformers": "hf_trainer.py"}


def console(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *map(str, args)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=ENV)


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
    """Both examples started at once (their imports take seconds each), each until stopped."""
    base = tmp_path_factory.mktemp("frameworks")
    started = {}
    for name, script in EXAMPLES.items():
        log = open(base / f"{name}.out", "wb")
        proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / script), str(base / name), "--steps",
                                 "1000000"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV,
                                start_new_session=True)
        started[name] = (proc, base / name, log)
    yield started
    for proc, _, log in started.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        log.close()


def _steps(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / LOSS_JSON).read_text().splitlines() if '"loss"' in line)
    except OSError:
        return 0


@pytest.mark.parametrize("framework", list(EXAMPLES))
def test_the_console_reads_checkpoints_and_stops_a_framework(trainers, framework):
    proc, run_dir, log = trainers[framework]
    deadline = time.monotonic() + 120
    while not (verify_trainer(run_dir).ok and _steps(run_dir) >= 3):
        assert proc.poll() is None, (run_dir.parent / f"{framework}.out").read_text()[-3000:]
        assert time.monotonic() < deadline, "the example never logged a step"
        time.sleep(0.1)
    report = json.loads(console(run_dir, "--json").stdout)
    assert report["trainer"]["state"] == "running"
    assert report["history"]["steps"] >= 3 and math.isfinite(report["history"]["last_loss"])
    r = console(run_dir, "--checkpoint", "--timeout", "120")
    assert r.returncode == 0, r.stderr
    saved = Path(r.stdout.strip())
    assert saved.exists() and saved.parent == run_dir / "checkpoints"
    report = json.loads(console(run_dir, "--json").stdout)
    listed = report["external_checkpoints"]
    assert [Path(c["path"]).name for c in listed] == [saved.name] and listed[0]["size"] > 0
    assert listed[0]["status"] == "external" and listed[0]["reason"] == "signal"
    assert report["checkpoints"] == []                  # never one of ours: not resumed, not rolled back to
    r = console(run_dir, "--stop", "--timeout", "120")
    assert r.returncode == 0, r.stderr
    assert "exited cleanly" in r.stdout and "final checkpoint checkpoints/" in r.stdout
    assert proc.wait(60) == 0
    report = json.loads(console(run_dir, "--json").stdout)
    assert report["trainer"]["state"] == "stopped" and len(report["external_checkpoints"]) == 2
    r = console(run_dir, "--rollback", "--to", listed[0]["step"], "--yes")
    assert r.returncode != 0 and "no complete checkpoint" in r.stderr      # not ours to roll back to


LATE_SIGTERM = '''
import os, signal, sys
import lightning as L
import torch
from rundir.integrations.lightning import RundirCallback

class Late(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
L.Trainer(max_steps=100, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, callbacks=[RundirCallback(sys.argv[1]), Late()]).fit(Tiny(), data)
'''


def test_a_sigterm_lightning_sees_first_still_stops_with_a_checkpoint(tmp_path):
    """The SIGTERM lands just after the callback looked at its flags (another callback sends
    it), so Lightning's own handler ends fit at the step's end: the stop is still the run's,
    with its checkpoint, exit status 0."""
    run_dir = tmp_path / "run"
    script = tmp_path / "late_sigterm.py"
    script.write_text(LATE_SIGTERM)
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(console(run_dir, "--json").stdout)
    assert report["trainer"]["state"] == "stopped"
    assert [(c["step"], c["reason"]) for c in report["external_checkpoints"]] == [(3, "signal")]
    assert (run_dir / report["external_checkpoints"][0]["path"]).stat().st_size > 0
    assert "stop (signal) at step 3" in (run_dir / TRAINER_LOG).read_text()


FAILING_SAVE = '''
import sys, time
import lightning as L
import torch
from rundir.integrations.lightning import RundirCallback

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        time.sleep(0.01)
        return self.net(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

run_dir, blocked = sys.argv[1], sys.argv[2]          # blocked: a file where the checkpoints' directory would be
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
L.Trainer(max_steps=1_000_000, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, callbacks=[RundirCallback(run_dir, dirpath=blocked)]).fit(Tiny(), data)
'''


def test_a_stop_that_fails_in_the_framework_is_said_as_an_error(tmp_path):
    """``s`` to a Lightning fit whose final checkpoint cannot be written (its directory is a
    file): the fit ends with the error, and the console says so (``--stop`` exit 1, ``--check``
    exit 2), never "exited cleanly"."""
    run_dir, blocked = tmp_path / "run", tmp_path / "blocked"
    blocked.write_text("a file, not a directory\n")
    script = tmp_path / "failing_save.py"
    script.write_text(FAILING_SAVE)
    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen([sys.executable, str(script), str(run_dir), str(blocked)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=ENV, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (verify_trainer(run_dir).ok and _steps(run_dir) >= 3):
            assert proc.poll() is None, (tmp_path / "out").read_text()[-3000:]
            assert time.monotonic() < deadline, "the fit never logged a step"
            time.sleep(0.1)
        r = console(run_dir, "--stop", "--timeout", "120")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "exited with an error (error: " in r.stdout and "cleanly" not in r.stdout, r.stdout
        assert proc.wait(60) != 0
        check = console(run_dir, "--check")
        assert check.returncode == 2 and "the trainer stopped with an error" in check.stdout, check.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


FAILING_HF = '''
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from rundir.integrations.transformers import RundirCallback

class Fails(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise RuntimeError("the framework failed")

ids = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": row, "labels": row} for row in ids]
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
args = TrainingArguments(output_dir=sys.argv[1] + "/checkpoints", max_steps=100, per_device_train_batch_size=4,
                         logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data, callbacks=[RundirCallback(sys.argv[1]), Fails()]).train()
'''


def test_a_hugging_face_trainer_that_fails_is_said_as_an_error(tmp_path):
    """The Trainer has no hook for its own failure: the exception that ends the script is the
    run's stop reason (``error: RuntimeError``, from the run API's exit hook), and the console
    says an error (``--check`` exit 2), never a clean exit."""
    run_dir = tmp_path / "run"
    script = tmp_path / "failing_hf.py"
    script.write_text(FAILING_HF)
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env=ENV)
    assert done.returncode == 1 and "the framework failed" in done.stderr, done.stderr[-3000:]
    stops = [json.loads(line) for line in (run_dir / LOSS_JSON).read_text().splitlines() if '"event":"stop"' in line]
    assert [s["reason"] for s in stops] == ["error: RuntimeError"], stops
    check = console(run_dir, "--check")
    assert check.returncode == 2 and "the trainer stopped with an error" in check.stdout, check.stdout


# A tiny GPT-2 on a few tokens, for the Hugging Face scripts below.
HF_TINY = '''
import os, signal, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from rundir.integrations.transformers import RundirCallback

class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.arange(8) % 16
        return {"input_ids": ids, "labels": ids}

def tiny_gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=1))
'''

HF_RESUMED = HF_TINY + '''
def trainer(steps):
    model = tiny_gpt2()
    args = TrainingArguments(output_dir=os.path.join(sys.argv[1], "checkpoints"), max_steps=steps,
                             per_device_train_batch_size=4, logging_steps=1, save_steps=2, report_to=[],
                             use_cpu=True, disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[RundirCallback(sys.argv[1])])

trainer(4).train()
trainer(6).train(resume_from_checkpoint=True)
'''


def test_a_hugging_face_resume_from_the_newest_checkpoint_names_it(tmp_path):
    """train(resume_from_checkpoint=True): the Trainer finds its newest checkpoint itself; the
    resume event names it (checkpoints/checkpoint-4), not just its step."""
    run_dir = tmp_path / "hf"
    r = subprocess.run([sys.executable, "-c", HF_RESUMED, str(run_dir)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    resumes = [json.loads(line) for line in (run_dir / LOSS_JSON).read_text().splitlines() if '"resume"' in line]
    assert [(e["step"], e["checkpoint"]) for e in resumes] == [(4, "checkpoints/checkpoint-4")]
    assert "resume from step 4 (checkpoints/checkpoint-4)" in (run_dir / TRAINER_LOG).read_text()


HF_SIGNALLED = HF_TINY + '''
class Usr1(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 4:          # during the fifth step: taken at its end
            os.kill(os.getpid(), signal.SIGUSR1)

model = tiny_gpt2()
args = TrainingArguments(output_dir=os.path.join(sys.argv[1], "checkpoints"), max_steps=8,
                         per_device_train_batch_size=4, logging_steps=1, save_strategy="no", report_to=[],
                         use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[RundirCallback(sys.argv[1]), Usr1()]).train()
'''


def test_a_hugging_face_checkpoint_request_is_said_at_the_step_its_checkpoint_has(tmp_path):
    """The Trainer's step ends (where the callback takes a request) before its log line: the
    SIGUSR1 event names the step of the checkpoint it makes (checkpoint-5), not the step before."""
    run_dir = tmp_path / "hf"
    r = subprocess.run([sys.executable, "-c", HF_SIGNALLED, str(run_dir)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / LOSS_JSON).read_text().splitlines() if '"event"' in line]
    said = [(e["event"], e["step"], e.get("path")) for e in events if e["event"] in ("signal", "external_checkpoint")]
    assert said == [("signal", 5, None), ("external_checkpoint", 5, "checkpoints/checkpoint-5")]
    log = (run_dir / TRAINER_LOG).read_text()
    assert "SIGUSR1 received: checkpoint at step 5" in log and "checkpoint checkpoints/checkpoint-5 at step 5" in log
