"""Signal handlers only set flags; several SIGUSR1 are one request; a SIGUSR1 that arrives
once a checkpoint is complete is answered by the next step's."""

from __future__ import annotations

import io
import os
import signal

import pytest
import torch

from rundir import list_checkpoints, load_run_config
from rundir.signals import SignalFlags
from tests.trainer.trainer_runs import events
from trainer.data import ArmData
from trainer.determinism import configure
from trainer.outputs import RunOutputs
from trainer.progress import Progress
from trainer.resume import build_state
from trainer.train import train


def test_handlers_set_flags_and_several_usr1_collapse():
    before = signal.getsignal(signal.SIGTERM)
    with SignalFlags() as flags:
        assert not flags.pending
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGUSR1)
        assert flags.pending
        requests = flags.take()
        assert requests.checkpoint and not requests.stop and requests.names == ["SIGUSR1"] * 3
        assert not flags.pending and not flags.take()
        os.kill(os.getpid(), signal.SIGTERM)
        requests = flags.take()
        assert requests.stop and not requests.checkpoint
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before


def test_take_until_a_mark_leaves_later_signals_pending():
    with SignalFlags() as flags:
        os.kill(os.getpid(), signal.SIGUSR1)
        cut = flags.mark()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flags.take(cut).names == ["SIGUSR1"]
        assert flags.pending and not flags.stop_pending
        os.kill(os.getpid(), signal.SIGINT)
        assert flags.stop_pending
        requests = flags.take()
        assert requests.checkpoint and requests.stop and requests.names == ["SIGUSR1", "SIGINT"]
        assert not flags.pending


class SignalAfterCheckpoint(RunOutputs):
    """Real outputs that send this process a real SIGUSR1 once the first checkpoint is complete,
    as a console does that saw that checkpoint before signalling."""

    sent = False

    def checkpoint_written(self, info, reason, **timing):
        super().checkpoint_written(info, reason, **timing)
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGUSR1)


@pytest.mark.parametrize("async_checkpoint", [False, True])
def test_a_sigusr1_after_a_complete_checkpoint_gets_the_next_steps(trainer_run, async_checkpoint):
    configure(threads=1)
    run = trainer_run("late-usr1", checkpoint_every=2, async_checkpoint=async_checkpoint)
    config = load_run_config(run)
    arms = {n: ArmData.load(n, a.source, run, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"), None)
    out = SignalAfterCheckpoint(run, Progress(run, config.run.log_every, stream=io.StringIO()), config.samples.keep, 0)
    with SignalFlags() as flags:
        assert train(state, out, flags, stop_at=4) == "max_steps"
    (usr1,) = events(run, "signal")
    assert usr1["during_checkpoint"] is False
    steps = [info.step for info in list_checkpoints(run)]
    if not async_checkpoint:
        assert steps == [2, 3, 4] and usr1["step"] == 3
    else:
        # A background write is seen complete at a later boundary (3, or 4 if still being
        # written at 3): the SIGUSR1 sent then is answered by a checkpoint at that step.
        assert usr1["step"] in (3, 4) and steps == sorted({2, usr1["step"], 4})
