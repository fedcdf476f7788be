"""PyTorch Lightning, operated by the console: ``RundirCallback``.

    from rundir.integrations.lightning import RundirCallback
    trainer = L.Trainer(callbacks=[RundirCallback("runs/x", config=hparams)])

At each optimizer step it logs the training step's loss and the first optimizer's learning
rate, and ``trainer.callback_metrics`` every ``log_every_n_steps`` (Lightning's own logging
cadence; ``loss`` or ``train_loss`` there is the loss when the step returns none); a
checkpoint asked for from the console (``c``, SIGUSR1, the request file) is saved with
``trainer.save_checkpoint`` (into ``RUN_DIR/checkpoints/`` unless ``dirpath`` says) and
reported; a stop (``s``, SIGTERM, Ctrl-C) saves one and ends ``fit`` with
``trainer.should_stop``, normally, exit status 0. The run is opened when ``fit`` sets up
(after the strategy has started the job's processes, before it installs its signal
handlers) and finished at its end. Resuming (``fit(ckpt_path=...)``) is said in the history.

Several processes (``strategy="ddp"``, any launcher: Lightning's own, torchrun, ``srun``):
the callback as given to ``Trainer(callbacks=[...])`` runs on every rank, and every rank
opens the run (:mod:`rundir.job`: rank 0 owns it, the others write nothing). Each step's
``run.log`` agrees the requests over the strategy's process group, so every rank reads the
same decision at the same step: on a checkpoint, ``trainer.save_checkpoint`` runs on every
rank (Lightning's own collective save) and ``run.checkpoint_saved`` on every rank, rank 0
reporting it once all have returned; on a stop, every rank saves and sets ``should_stop``,
and every rank exits 0. Lightning's own SIGTERM handler is put aside for ``fit`` there (it
broadcasts from inside the handler, at whatever point each rank is, which can deadlock the
job): the run's agreed stop answers SIGTERM instead, whichever rank it reached.

Under SLURM with Lightning's auto-requeue (its ``SLURMEnvironment``, the default there)
SIGUSR1 stays Lightning's: ``#SBATCH --signal=USR1@90`` still saves ``hpc_ckpt_N.ckpt`` and
requeues the job. The run then gives up its own SIGUSR1 handler before ``fit`` installs
Lightning's, and ``.trainer.json`` says the console asks for a checkpoint through the request
file (``c`` checkpoints without requeueing). A requeue is in the history: Lightning's
checkpoint reported, the stop that follows with reason ``requeue``, and the next job's
resume from that checkpoint.

``lightning`` is imported only when the callback is first used (extra ``[lightning]``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layout import CHECKPOINT_SIGNALS, EXTERNAL_CHECKPOINTS_DIR, STOP_REQUEUE
from . import RESERVED, scalars

if TYPE_CHECKING:
    from ..run import Run

__all__ = ["RundirCallback"]


def _build() -> type:
    from lightning.pytorch import Callback

    return type("RundirCallback", (_Hooks, Callback), {"__module__": __name__, "__doc__": _Hooks.__doc__})


class _Hooks:
    """Logs, checkpoints and stops a Lightning ``fit`` for the console. ``run``: a run
    directory (opened with ``config`` when ``fit`` sets up, on every rank) or a
    :class:`~rundir.run.Run` opened by the caller (who finishes it). (``RundirCallback`` is this
    and ``lightning.pytorch.Callback``.)"""

    def __init__(self, run: "str | Path | Run", config: dict[str, Any] | None = None,
                 dirpath: "str | Path | None" = None):
        from ..run import Run

        self._opened: Run | None = run if isinstance(run, Run) else None
        self.owned = self._opened is None
        self._path = run.path if isinstance(run, Run) else Path(run)
        self._config = config
        self.dirpath = Path(dirpath) if dirpath is not None else self._path / EXTERNAL_CHECKPOINTS_DIR
        self._logged = -1
        self._requeues = _RequeueWatch()

    @property
    def run(self) -> "Run":
        if self._opened is None:
            raise RuntimeError("RundirCallback: the run is opened when Trainer.fit sets up")
        return self._opened

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # Now: the strategy has started the job's processes (a rank knows its rank), and fit
        # has not installed its signal handlers yet (Lightning's SIGTERM then calls ours too).
        if stage != "fit":
            return
        if self._opened is None:
            from ..run import open_run
            self._opened = open_run(self._path, self._config)
        if _requeue_signal(trainer) in CHECKPOINT_SIGNALS:
            self.run.leave_checkpoint_signal()      # SIGUSR1 left free for Lightning's requeue

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._requeues.watch(trainer)
        if trainer.world_size > 1:
            _sigterm_to_the_run(trainer)
        step, last = trainer.global_step, self.run.last_step
        if trainer.ckpt_path is not None or (last is not None and step < last):
            self.run.resumed(step, trainer.ckpt_path)

    def _report_requeues(self) -> None:
        for step, path in self._requeues.take():
            self.run.checkpoint_saved(step, path)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step > self._logged:             # an optimizer step completed (not an accumulation)
            self._logged = step
            _log_step(self.run, trainer, step, outputs)
        self._report_requeues()
        self._save_requested(trainer)
        if self.run.stop_requested:
            trainer.should_stop = True
            # The stop is this callback's: fit ends normally, not by Lightning's own
            # SIGTERM exit (its handler saw the same signal).
            connector = getattr(trainer, "_signal_connector", None)
            if connector is not None and hasattr(connector, "received_sigterm"):
                connector.received_sigterm = False

    def _save_requested(self, trainer: Any) -> None:
        if self.run.checkpoint_requested:
            step = trainer.global_step
            path = self.dirpath / f"step-{step}.ckpt"
            trainer.save_checkpoint(path)
            self.run.checkpoint_saved(step, path)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        # A SIGTERM after this callback looked at the flags ends fit by Lightning's own
        # handler (SIGTERMException, exit status 0): the stop is still ours, with its checkpoint.
        stopped = False
        if isinstance(exception, SIGTERMException):
            # The last look: checkpoint_requested first, which takes a stop that came after the
            # step's look (stop_requested alone leaves such a stop to a next step fit won't have).
            self.run.checkpoint_requested            # read for what it takes; its answer is _save_requested's
            stopped = self.run.stop_requested
        reason = None if stopped else f"error: {type(exception).__name__}"
        if self._opened is None:
            return                          # fit failed before it set up: no run was opened
        try:
            self._report_requeues()
            if reason is None:
                self._save_requested(trainer)
        except Exception as err:        # noqa: BLE001  (Lightning's own teardown must still run)
            reason = f"error: {type(err).__name__}"
        finally:
            if self.owned:
                self.run.finish(reason if reason is not None else self._stop_reason())

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.owned and stage == "fit" and self._opened is not None:
            self._report_requeues()
            self.run.finish(self._stop_reason())

    def _stop_reason(self) -> str | None:
        """``requeue`` for the stop that follows Lightning's requeue (SLURM ends the job and
        runs it again), else the run's own."""
        return STOP_REQUEUE if self._requeues.requeued and self.run.stop_requested else None


class _RequeueWatch:
    """Lightning's SLURM SIGUSR1 handler, wrapped to note the checkpoint it saves before it
    requeues the job; the callback reports it at the step's end (nothing is written from
    inside a handler)."""

    def __init__(self) -> None:
        self.saved: list[tuple[int, str]] = []
        self.requeued = False           # a save reported: the stop that follows is SLURM's requeue

    def watch(self, trainer: Any) -> None:
        sig = _requeue_signal(trainer)
        handler = signal.getsignal(sig) if sig is not None else None
        if sig is None or not callable(handler):
            return
        connector = trainer._checkpoint_connector

        def requeue(signum: int, frame: Any) -> None:
            path = connector.hpc_save_path(trainer.default_root_dir)
            handler(signum, frame)
            if os.path.exists(path):
                self.saved.append((trainer.global_step, path))
        signal.signal(sig, requeue)

    def take(self) -> list[tuple[int, str]]:
        count = len(self.saved)             # a save noted meanwhile stays for the next take
        taken = self.saved[:count]
        del self.saved[:count]
        self.requeued = self.requeued or bool(taken)
        return taken


def _sigterm_to_the_run(trainer: Any) -> None:
    """With several processes, SIGTERM goes back to the handler fit found (the run's) for the
    rest of ``fit``: Lightning's own broadcasts from inside the handler, wherever each rank is
    (a collective out of step with the other ranks'), and kills its launcher's other ranks; the
    run's agreed stop ends every rank at one step, each with the final checkpoint."""
    connector = getattr(trainer, "_signal_connector", None)
    original = getattr(connector, "_original_handlers", {}).get(signal.SIGTERM)
    if callable(original):
        signal.signal(signal.SIGTERM, original)


def _requeue_signal(trainer: Any) -> Any:
    """The signal Lightning's SLURM auto-requeue takes (SIGUSR1 by default), or None when it
    does not requeue (not under SLURM, or ``SLURMEnvironment(auto_requeue=False)``)."""
    from lightning.fabric.plugins.environments.slurm import SLURMEnvironment

    environment = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        return environment.requeue_signal
    return None


def _log_step(run: Any, trainer: Any, step: int, outputs: Any) -> None:
    """A Lightning step's line: its own loss at every step; the logged metrics (computed anew
    at each access of callback_metrics: the callback's largest cost) at Lightning's
    log_every_n_steps."""
    out: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
    loss = out.item() if hasattr(out, "item") and getattr(out, "ndim", 0) == 0 else None
    every = getattr(trainer, "log_every_n_steps", 1) or 1
    metrics = scalars(trainer.callback_metrics) if step % every == 0 or loss is None else {}
    named = metrics.pop("loss", metrics.pop("train_loss", None))
    loss = named if loss is None else loss
    lr = None
    if trainer.optimizers and trainer.optimizers[0].param_groups:
        lr = trainer.optimizers[0].param_groups[0].get("lr")
    grad_norm = metrics.pop("grad_norm", None)
    extra = {key: value for key, value in metrics.items() if key not in RESERVED}
    run.log(step, loss=loss, lr=lr if isinstance(lr, float) else None, grad_norm=grad_norm, **extra)


def __getattr__(name: str) -> Any:
    if name == "RundirCallback":
        value = globals()[name] = _build()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
