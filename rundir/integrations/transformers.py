"""Hugging Face ``Trainer``, operated by the console: ``RundirCallback``.

    from rundir.integrations.transformers import RundirCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[RundirCallback("runs/x")])

It opens the run when the ``Trainer`` is built (``config``: the one given, else the
``TrainingArguments``), logs every ``on_log`` with a training loss (at ``logging_steps``:
set 1 for a line per step), and at each step's end answers the console: a checkpoint asked
for sets ``control.should_save`` (the ``Trainer`` saves ``output_dir/checkpoint-N/`` as it
always does, reported when it is saved), a stop sets ``control.should_save`` and
``control.should_training_stop``, so ``train()`` returns normally. A run this callback
opened it finishes at the end of training. Resuming
(``train(resume_from_checkpoint=...)``) is said in the history.

Several processes (``torchrun``, ``accelerate launch``): the callback runs on every rank and
every rank opens the run (:mod:`rundir.job`: rank 0 owns it, the others write nothing). At
each ``on_step_end`` every rank agrees the requests over the job's process group
(``run.agree()``, one small all-reduce), so ``control.should_save`` and
``control.should_training_stop`` are set identically on every rank at the same step: the
``Trainer``'s own collective paths (its save, ``store_flos``) then run on every rank, and
``s`` ends every rank with the final checkpoint and exit status 0. Each rank reports the
saved checkpoint (``run.checkpoint_saved`` at ``on_save``); rank 0 reports it once all have.

``transformers`` is imported only when the callback is first used (extra ``[transformers]``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RundirCallback"]



def _build() -> type:
    import os
    from pathlib import Path

    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from ..run import Run, open_run
    from . import RESERVED, scalars

    named = RESERVED | {"learning_rate"}       # what a training log holds that is no series of its own

    class RundirCallback(TrainerCallback):
        """Logs, checkpoints and stops a Hugging Face ``Trainer`` for the console. ``run``: a
        run directory (opened when the Trainer is built) or a :class:`~rundir.run.Run` opened
        by the caller (who finishes it)."""

        def __init__(self, run: "str | Path | Run", config: dict[str, Any] | None = None):
            self.owned = not isinstance(run, Run)
            self.run: Run | None = run if isinstance(run, Run) else None
            self._path, self._config = run, config

        def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None:                # every rank: rank 0 owns the run, the others join it
                assert not isinstance(self._path, Run)      # no Run given: a path
                self.run = open_run(self._path, self._config if self._config is not None else args.to_dict())

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None:
                return
            step, last = state.global_step, self.run.last_step
            if step > 0 or (last is not None and step < last):
                self.run.resumed(step, self._resumed_from(args, step))

        @staticmethod
        def _resumed_from(args: Any, step: int) -> str | None:
            """The checkpoint the Trainer resumed from: ``args.resume_from_checkpoint`` where it names
            one, else (``train(resume_from_checkpoint=True)``: the newest, which the callback is not
            told) ``output_dir/checkpoint-STEP``, the one of the step the Trainer's state resumed at."""
            named = getattr(args, "resume_from_checkpoint", None)
            if isinstance(named, str) and os.path.isdir(named):
                return named
            found = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
            return found if os.path.isdir(found) else None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if self.run is None or not logs or "loss" not in logs:
                return                          # an eval's or the end's summary: no training line
            self.run.log(state.global_step, loss=logs["loss"], lr=logs.get("learning_rate"),
                         grad_norm=logs.get("grad_norm"), **scalars(logs, skip=named))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None:
                return
            # The decision (the same on every rank, with several), taken at this step: the
            # Trainer's step ends before its log line, and a checkpoint asked for now is this
            # step's (checkpoint-N), as the request's event says.
            self.run.agree(state.global_step)
            if self.run.checkpoint_requested:
                control.should_save = True
            if self.run.stop_requested:
                control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.run is None:
                return
            path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            # With several processes every rank reports it (a collective: none may skip it);
            # rank 0, which checks the path, reports it once all have returned from the save.
            if self.run.world_size > 1 or os.path.exists(path):
                self.run.checkpoint_saved(state.global_step, path)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.owned and self.run is not None:
                self.run.finish()

    return RundirCallback


def __getattr__(name: str) -> Any:
    if name == "RundirCallback":
        value = globals()[name] = _build()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
