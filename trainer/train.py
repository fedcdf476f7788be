"""The training loop: one function, one update per iteration, in seed 003's order.

One update: train mode; draw the batch (the bandit picks the arm, the arm's sampler the
windows); ``zero_grad``; forward; backward; record the global gradient norm; clip to
``grad_clip``; the AdamW step. A non-finite gradient norm skips the step (the line
says so) rather than poisoning the weights, and so does a non-finite loss; after
``run.max_nonfinite`` of them in a row the trainer stops (:mod:`trainer.guard`). Then
the step boundary, where the state is whole and every write happens: the ``.loss.json``
line, the bandit update, the live state, the sample audit, checkpoints (cadence,
signal, final) and the signal flags.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from trainer.faults import forced_nonfinite
from trainer.guard import NonfiniteGuard, SafetyStop, describe_os_error
from trainer.outputs import RunOutputs
from trainer.resume import save_checkpoint
from rundir import latest_resumable
from trainer.samples import audit_samples
from trainer.signals import STOP_NAMES, SignalFlags
from trainer.state import TrainingState

EMA_LOSS = 0.98       # smoothing of the displayed EMA loss


def train(state: TrainingState, out: RunOutputs, signals: SignalFlags, stop_at: int = 0,
          saved_step: int | None = None) -> str:
    """Train until step ``stop_at`` (0: until a stop signal). Returns why it stopped:
    ``"max_steps"`` (a final checkpoint was written) or ``"signal"`` (SIGTERM/SIGINT:
    a checkpoint at the last completed step was written). Raises :class:`SafetyStop`
    when the run diverged or a checkpoint it must write failed (:mod:`trainer.guard`).
    ``saved_step`` is the step of the checkpoint the state was restored from (a signal
    before the first update needs no new one)."""
    run, opt_config = state.config.run, state.config.optimizer
    model, optimizer = state.model, state.optimizer
    ranks, forward = state.ranks, state.forward_module     # under torchrun: every rank, in step (distributed.py)
    guard = NonfiniteGuard(run.max_nonfinite)

    if signals.stop_pending and _checkpoint_and_signals(state, out, signals, None, saved_step):
        out.event("stop", state.step, "stopping on signal before the first update", reason="signal")
        return "signal"
    while True:
        # ---- one update ----
        model.train()
        arm = ranks.choose_arm(state.bandit)                    # rank 0's draw, broadcast
        prob = state.bandit.prob[arm]
        x, y = state.samplers[arm].next_batch(state.device, ranks.rank, ranks.world_size)   # this rank's share
        optimizer.zero_grad()
        _, loss = forward(x, y)
        if (poison := forced_nonfinite(state.step + 1)) is not None:     # test-only fault hook
            loss = loss * poison
        loss.backward()
        grad = optimizer.gather_grad()
        grad_norm = float(torch.linalg.vector_norm(grad))       # recorded before clipping
        loss_value = ranks.mean(float(loss.detach()))          # the same number on every rank
        finite = math.isfinite(grad_norm) and math.isfinite(loss_value)
        if finite:                                              # a NaN/inf loss or gradient is never applied
            optimizer.clip_(grad, grad_norm, opt_config.grad_clip)
            optimizer.step(grad)
        state.step += 1
        state.tokens_seen += x.numel() * ranks.world_size

        # ---- the step boundary ----
        bad = guard.observe(state.step, loss_value, grad_norm)
        extra = {"p": prob} if finite else {"p": prob, "skipped": f"nonfinite {bad}"}
        out.step(state.step, loss_value, opt_config.lr, grad_norm, arm, state.tokens_seen, **extra)
        state.bandit.update(arm, loss_value)
        if math.isfinite(loss_value):
            state.ema_loss = loss_value if state.ema_loss is None else \
                EMA_LOSS * state.ema_loss + (1 - EMA_LOSS) * loss_value
        out.progress.step(state.step, loss_value, state.ema_loss, arm, state.tokens_seen)
        if state.step % run.state_every == 0:
            out.write_state(state.bandit, state.step)
        if state.step % run.sample_every == 0 and ranks.writer:
            out.add_samples(audit_samples(state, state.config.samples))

        if guard.tripped:
            _diverged(state, out, guard)
        final = bool(stop_at) and state.step >= stop_at
        cadence = state.step % run.checkpoint_every == 0
        stop = _checkpoint_and_signals(state, out, signals, "final" if final else "cadence" if cadence else None)
        if final:
            out.event("stop", state.step, f"reached max-steps {stop_at}: stopping", reason="max_steps")
            return "max_steps"
        if stop:
            out.event("stop", state.step, "stopping on signal", reason="signal")
            return "signal"


def _checkpoint_and_signals(state: TrainingState, out: RunOutputs, signals: SignalFlags, reason: str | None,
                            saved_step: int | None = None) -> bool:
    """At a step boundary: write at most one checkpoint (for the cadence, the final step or
    any signal) and return whether a stop was requested. A SIGUSR1 is answered by a
    checkpoint only if it arrived before that checkpoint was complete: one that arrives
    later stays pending for the next step's (a console that saw this checkpoint before
    it signalled is waiting for a newer one). A stop is covered by this step's checkpoint
    whenever it arrives."""
    stop = False
    written = saved_step == state.step
    failed = False
    during_write = False
    covered_until: int | None = None        # take everything that has arrived
    while True:
        requests = signals.take(covered_until)
        for name in requests.names:
            action = "stop" if name in STOP_NAMES else "checkpoint"
            out.event("signal", state.step, f"{name} received: {action} at step {state.step}",
                      signal=name, action=action, during_checkpoint=during_write)
        stop = stop or requests.stop
        if requests and reason is None:
            reason = "signal"
        if reason is not None and not written:
            complete_at: list[int] = []
            failed = not _write_checkpoint(state, out, reason, continues=not stop and reason != "final",
                                           before_complete=lambda: complete_at.append(signals.mark()))
            written, during_write = True, True
            covered_until = complete_at[0] if complete_at else None
            continue
        if not signals.stop_pending:
            if failed and (stop or reason == "final"):
                raise SafetyStop(f"the {'final' if reason == 'final' else 'stop'} checkpoint at step {state.step} "
                                 f"could not be written; {_resume_hint(out)}")
            return stop
        covered_until = None


def _write_checkpoint(state: TrainingState, out: RunOutputs, reason: str, continues: bool,
                      before_complete: Callable[[], None] | None = None) -> bool:
    """One checkpoint; a write that fails (a full disk) is logged and returns False. The
    library removed its temporary file: the previous checkpoint stays the newest."""
    try:
        info = save_checkpoint(state, out.run_dir, before_complete)
    except OSError as err:
        out.checkpoint_failed(state.step, reason, err,
                              f"checkpoint at step {state.step} ({reason}) FAILED: {describe_os_error(err)}; "
                              f"{_resume_hint(out)}"
                              + ("; training continues and the next checkpoint retries" if continues else ""))
        return False
    out.write_state(state.bandit, state.step, durable=True)
    out.checkpoint_written(info, reason)
    return True


def _resume_hint(out: RunOutputs) -> str:
    newest = latest_resumable(out.run_dir)
    return f"the newest checkpoint is {newest.path.name}, intact" if newest else "there is no earlier checkpoint"


def _diverged(state: TrainingState, out: RunOutputs, guard: NonfiniteGuard) -> None:
    """``run.max_nonfinite`` non-finite steps in a row: checkpoint the last good state and stop."""
    good = guard.last_good_step
    what = f"weights, m and v of step {good}" if good is not None else "the weights it started from"
    if _write_checkpoint(state, out, "nonfinite", continues=False):
        saved = f"the checkpoint at step {state.step} holds {what} (every update since was skipped)"
    else:
        saved = f"no checkpoint could be written; {_resume_hint(out)}"
    message = (f"{guard.in_a_row} non-finite steps in a row (run.max_nonfinite = {guard.limit}): the run diverged; "
               f"{saved}; lower the learning rate or resume from an earlier checkpoint")
    out.event("stop", state.step, f"stopping: {message}", reason="nonfinite", in_a_row=guard.in_a_row,
              last_good_step=good)
    raise SafetyStop(message)
