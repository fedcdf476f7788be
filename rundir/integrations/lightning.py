"""PyTorch Lightning, operated by the console: ``RundirCallback``.

    from rundir.integrations.lightning import RundirCallback
    trainer = L.Trainer(callbacks=[RundirCallback("runs/x", config=hparams)])

At each optimizer step it logs the training step's loss and the first optimizer's learning
rate, and ``trainer.callback_metrics`` every ``log_every_n_steps`` (Lightning's own logging
cadence; ``loss`` or ``train_loss`` there is the loss when the step returns none); a
checkpoint asked for from the console (``c``, SIGUSR1, the request file) is saved with
``trainer.save_checkpoint`` (into ``RUN_DIR/checkpoints/`` unless ``dirpath`` says) and
reported; a stop (``s``, SIGTERM, Ctrl-C) saves one and ends ``fit`` with
``trainer.should_stop``, normally, exit status 0. A run this callback opened it finishes at
the end of ``fit``. Resuming (``fit(ckpt_path=...)``) is said in the history. One process
(no multi-device strategy).

``lightning`` is imported only when the callback is first used (extra ``[lightning]``).
"""

from __future__ import annotations

from typing import Any

from . import RESERVED, scalars

__all__ = ["RundirCallback"]


def _build() -> type:
    from pathlib import Path

    from lightning.pytorch import Callback
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from ..layout import EXTERNAL_CHECKPOINTS_DIR
    from ..run import Run, open_run

    class RundirCallback(Callback):
        """Logs, checkpoints and stops a Lightning ``fit`` for the console. ``run``: a run
        directory (opened here, with ``config``) or a :class:`~rundir.run.Run` opened by the
        caller (who finishes it)."""

        def __init__(self, run: "str | Path | Run", config: dict[str, Any] | None = None,
                     dirpath: "str | Path | None" = None):
            # Opened now, before fit installs Lightning's own SIGTERM handler, which then
            # calls ours as well.
            self.owned = not isinstance(run, Run)
            self.run = open_run(run, config) if self.owned else run
            self.dirpath = Path(dirpath) if dirpath is not None else self.run.path / EXTERNAL_CHECKPOINTS_DIR
            self._logged = -1

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            step, last = trainer.global_step, self.run.last_step
            if trainer.ckpt_path is not None or (last is not None and step < last):
                self.run.resumed(step, trainer.ckpt_path)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = trainer.global_step
            if step > self._logged:             # an optimizer step completed (not an accumulation)
                self._logged = step
                _log_step(self.run, trainer, step, outputs)
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
            # A SIGTERM after this callback looked at the flags ends fit by Lightning's own
            # handler (SIGTERMException, exit status 0): the stop is still ours, with its checkpoint.
            reason = None if isinstance(exception, SIGTERMException) and self.run.stop_requested \
                else f"error: {type(exception).__name__}"
            try:
                if reason is None:
                    self._save_requested(trainer)
            except Exception as err:        # noqa: BLE001  (Lightning's own teardown must still run)
                reason = f"error: {type(err).__name__}"
            finally:
                if self.owned:
                    self.run.finish(reason)

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if self.owned and stage == "fit":
                self.run.finish()

    return RundirCallback


def _log_step(run: Any, trainer: Any, step: int, outputs: Any) -> None:
    """A Lightning step's line: its own loss at every step; the logged metrics (computed anew
    at each access of callback_metrics: the callback's largest cost) at Lightning's
    log_every_n_steps."""
    out = outputs.get("loss") if isinstance(outputs, dict) else outputs
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
