"""Signal handlers only set flags; several SIGUSR1 are one request."""

from __future__ import annotations

import os
import signal

from trainer.signals import SignalFlags


def test_handlers_set_flags_and_several_usr1_collapse():
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
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
