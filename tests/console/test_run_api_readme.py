"""The README's snippet of the run API, as it stands in README.md, in a loop: stopped by the
console's ``--stop`` with its final checkpoint and exit 0; and without its last line (a loop
that never looks at ``stop_requested``), on 2 processes under torchrun, still stopped by
``--stop``: the next ``run.log`` ends every rank with exit 0, and torchrun exits 0."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from rundir import verify_trainer
from rundir.external import external_checkpoints
from rundir.layout import LOSS_JSON
from tests.console.test_cli import console
from tests.ddp_jobs import ROOT, python, torchrun
from tests.rundirs import read_history as history

SCRIPT = """
import faulthandler, os, signal, sys
import torch
import rundir
faulthandler.register(signal.SIGUSR2, all_threads=True)
DDP = os.environ.get("WORLD_SIZE", "1") != "1"
if DDP:
    import torch.distributed as dist
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
lr = 1e-3
try:
    {first}
    for step in range(1, 10 ** 9):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state, path = model.state_dict(), os.path.join(sys.argv[1], f"step-{{step}}-{{os.environ.get('RANK', '0')}}.pt")
{rest}
finally:
    if DDP:
        dist.destroy_process_group()
"""


def readme_loop(tmp_path: Path, stop_line: bool = True) -> Path:
    block = re.search(r"```python\n(run = rundir\.open_run.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "the README's run API snippet"
    lines = block.group(1).strip().splitlines()
    assert lines[-1].startswith("if run.stop_requested"), lines
    first, rest = lines[0].replace('"runs/x"', "sys.argv[1]"), lines[1:] if stop_line else lines[1:-1]
    script = tmp_path / "readme_loop.py"
    script.write_text(SCRIPT.format(first=first, rest=textwrap.indent("\n".join(rest), " " * 8)))
    return script


def test_the_readmes_snippet_is_stopped_by_the_console(tmp_path):
    run = tmp_path / "x"
    with python(readme_loop(tmp_path), str(run), out=tmp_path / "out") as job:
        job.until(lambda: verify_trainer(run).ok and (run / LOSS_JSON).exists() and len(history(run).step) > 5,
                  "the loop verified and training")
        r = console(run, "--stop", "--timeout", "60", timeout=90)
        assert r.returncode == 0, r.stderr + job.output()
        assert job.wait("the loop's exit after the stop") == 0, job.output()
    h = history(run)
    saved = external_checkpoints(h.events)
    assert len(saved) == 1 and saved[0].reason == "signal" and saved[0].step == h.step[-1]
    assert h.events[-1].event == "stop" and h.events[-1].data["reason"] == "signal"


def test_a_job_that_never_looks_at_the_stop_is_ended_by_the_next_log_on_every_rank(tmp_path):
    run = tmp_path / "x"
    with torchrun(readme_loop(tmp_path, stop_line=False), str(run), out=tmp_path / "job.out") as job:
        job.until(lambda: verify_trainer(run).ok and (run / LOSS_JSON).exists() and len(history(run).step) > 5,
                  "rank 0 verified and training")
        r = console(run, "--stop", "--timeout", "60", timeout=90)
        assert r.returncode == 0, r.stderr + job.output()[-4000:]
        assert job.wait("torchrun's exit after the stop") == 0, job.output()[-4000:]
    h = history(run)
    saved = external_checkpoints(h.events)
    assert len(saved) == 1 and saved[0].reason == "signal" and h.step[-1] > saved[0].step
    assert h.events[-1].event == "stop" and h.events[-1].data["reason"] == "signal"
    assert "did not look at run.stop_requested" in (run / "trainer.log").read_text()
