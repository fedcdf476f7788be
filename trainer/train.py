"""The training loop: one function, one update per iteration, in seed 003's order.

One update: train mode; draw the batch (the bandit picks the arm, the arm's sampler the
windows); ``zero_grad``; forward and loss (under bf16 autocast when ``run.precision`` is
bf16: :mod:`trainer.precision`); backward; record the global gradient norm; clip to
``grad_clip``; the AdamW step. A non-finite gradient norm skips the step (the line
says so) rather than poisoning the weights, and so does a non-finite loss; after
``run.max_nonfinite`` of them in a row the trainer stops (:mod:`trainer.guard`). Then
the step boundary, where the state is whole and every write happens: the ``.loss.json``
line (with the GPU figures every ``state_every`` steps on CUDA: :mod:`trainer.gpu_figures`),
the bandit update, the live state, the held-out eval (:mod:`trainer.evaluation`), the
sample audit, checkpoints (cadence, signal, final) and the signal flags.
"""

from __future__ import annotations

import math

import torch

from rundir.layout import EVENT_EVAL, EVENT_SIGNAL, EVENT_STOP, STOP_NONFINITE
from rundir.rank_heartbeat import NO_HEARTBEAT, NoHeartbeat, RankHeartbeat
from rundir.retention import RetentionPolicy
from rundir.signals import STOP_NAMES, SignalFlags, SignalRequests
from trainer.checkpointer import Checkpointer, resume_hint
from trainer.evaluation import HeldOutEval
from trainer.faults import forced_nonfinite, loss_factor, slow_batch
from trainer.gpu_figures import GpuSampler, sampler_for
from trainer.guard import NonfiniteGuard, SafetyStop
from trainer.outputs import RunOutputs
from trainer.precision import autocast
from trainer.samples import audit_samples
from trainer.state import TrainingState

EMA_LOSS = 0.98       # smoothing of the displayed EMA loss


def train(state: TrainingState, out: RunOutputs, signals: SignalFlags, stop_at: int = 0,
          saved_step: int | None = None, ckpt: Checkpointer | None = None, gpu: GpuSampler | None = None,
          beat: RankHeartbeat | None = None) -> str:
    """Train until step ``stop_at`` (0: until a stop signal). Returns why it stopped:
    ``"max_steps"`` (a final checkpoint was written) or ``"signal"`` (SIGTERM/SIGINT:
    a checkpoint at the last completed step was written). Raises :class:`SafetyStop`
    when the run diverged or a checkpoint it must write failed (:mod:`trainer.guard`).
    ``saved_step`` is the step of the checkpoint the state was restored from (a signal
    before the first update needs no new one, and retention keeps it until a newer one is
    complete). Checkpoints go through ``ckpt`` (by default run.toml's: background writes
    unless ``run.async_checkpoint`` is false, pruned by its retention policy). The GPU
    figures come from ``gpu`` (started; by default NVML's sampler of a CUDA device, on
    every rank that keeps a record, else rank 0 only), which is closed on the way out. ``beat``: this
    rank's record (a job of several processes), stamped at each step (:mod:`rundir.rank_heartbeat`)."""
    run = state.config.run
    ckpt = ckpt or Checkpointer(state, out, signals.mark, run.async_checkpoint,
                                RetentionPolicy(run.keep_last, run.keep_every), saved_step)
    if gpu is None and (state.ranks.writer or beat is not None):
        gpu, why = sampler_for(state.device)
        if why:
            out.progress.message(why)
    if beat is not None and gpu is not None:
        beat.gpu = gpu.latest
    try:
        return _train(state, out, signals, ckpt, stop_at, saved_step, gpu, beat or NO_HEARTBEAT)
    finally:
        ckpt.close()                      # never leave with a write in flight
        if gpu is not None:
            gpu.close()


def _train(state: TrainingState, out: RunOutputs, signals: SignalFlags, ckpt: Checkpointer, stop_at: int,
           saved_step: int | None, gpu: GpuSampler | None, beat: RankHeartbeat | NoHeartbeat) -> str:
    run, opt_config = state.config.run, state.config.optimizer
    model, optimizer = state.model, state.optimizer
    ranks, forward = state.ranks, state.forward_module     # under torchrun: every rank, in step (distributed.py)
    guard = NonfiniteGuard(run.max_nonfinite)
    eval_every = run.eval_cadence
    # Rank 0 alone evaluates (the others wait for it in the next all-reduce, as for a checkpoint).
    held_out = HeldOutEval(state.samplers, state.device) if eval_every and ranks.writer else None

    if signals.stop_pending and _checkpoint_and_signals(state, out, signals, ckpt, None, saved_step):
        out.event(EVENT_STOP, state.step, "stopping on signal before the first update", reason="signal")
        return "signal"
    while True:
        # ---- one update ----
        model.train()
        arm = ranks.choose_arm(state.bandit)                    # rank 0's draw, broadcast
        beat.step_begins()                      # the ranks leave the broadcast together: this rank's work from here
        prob = state.bandit.prob[arm]
        slow_batch(ranks.rank)                  # test-only fault hook: a stalled data loader
        x, y = state.samplers[arm].next_batch(state.device, ranks.rank, ranks.world_size)   # this rank's share
        beat.batch_drawn()
        optimizer.zero_grad()
        with autocast(state.device, state.precision):
            _, loss = forward(x, y)
        beat.work_done()                        # before the gradients are exchanged (in backward)
        if (poison := forced_nonfinite(state.step + 1)) is not None:     # test-only fault hook
            loss = loss * poison
        if (factor := loss_factor(state.step + 1)) is not None:          # test-only fault hook: a spike
            loss = loss * factor
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
        beat.step_done(state.step)

        # ---- the step boundary ----
        bad = guard.observe(state.step, loss_value, grad_norm)
        extra = {"p": prob} if finite else {"p": prob, "skipped": f"nonfinite {bad}"}
        if gpu is not None and state.step % run.state_every == 0:
            extra.update(gpu.latest())          # the newest sample: never waits for NVML
            while (notice := gpu.take_notice()) is not None:
                out.progress.message(notice)
        out.step(state.step, loss_value, opt_config.lr, grad_norm, arm, state.tokens_seen, **extra)
        state.bandit.update(arm, loss_value)
        if math.isfinite(loss_value):
            state.ema_loss = loss_value if state.ema_loss is None else \
                EMA_LOSS * state.ema_loss + (1 - EMA_LOSS) * loss_value
        out.progress.step(state.step, loss_value, state.ema_loss, arm, state.tokens_seen)
        if state.step % run.state_every == 0:
            out.write_state(state.bandit, state.step)
        if held_out is not None and state.step % eval_every == 0:
            _evaluate(state, out, held_out)
        if state.step % run.sample_every == 0 and ranks.writer:
            out.add_samples(audit_samples(state, state.config.samples))

        if guard.tripped:
            _diverged(state, out, ckpt, guard)
        final = bool(stop_at) and state.step >= stop_at
        cadence = state.step % run.checkpoint_every == 0
        stop = _checkpoint_and_signals(state, out, signals, ckpt,
                                       "final" if final else "cadence" if cadence else None)
        if final:
            out.event(EVENT_STOP, state.step, f"reached max-steps {stop_at}: stopping{_took(ckpt)}", reason="max_steps",
                      **_final_timing(ckpt), **_device_memory(state))
            return "max_steps"
        if stop:
            out.event(EVENT_STOP, state.step, f"stopping on signal{_took(ckpt)}", reason="signal",
                      **_final_timing(ckpt), **_device_memory(state))
            return "signal"


def _evaluate(state: TrainingState, out: RunOutputs, held_out: HeldOutEval) -> None:
    """The ``eval`` event: the eager model's loss on the held-out windows (no RNG, no grad)."""
    result = held_out.run(state.model, state.step, state.device, state.precision)
    if result is None:
        return
    arms = ", ".join(f"{name} {_loss_text(loss)}" for name, loss in result.per_arm.items())
    out.event(EVENT_EVAL, state.step, f"eval at step {state.step}: held-out loss {_loss_text(result.eval_loss)} over "
                                  f"{result.windows} windows ({arms})", **result.fields())


def _loss_text(loss: float | None) -> str:
    return "non-finite" if loss is None else f"{loss:.4f}"


def _checkpoint_and_signals(state: TrainingState, out: RunOutputs, signals: SignalFlags, ckpt: Checkpointer,
                            reason: str | None, saved_step: int | None = None) -> bool:
    """At a step boundary: collect a finished background write, write at most one
    checkpoint (for the cadence, the final step or any signal) and return whether a stop
    was requested.

    A SIGUSR1 is answered by a checkpoint only if it arrived before that checkpoint was
    complete: one that arrives later stays pending for the next one (a console that saw
    this checkpoint before it signalled is waiting for a newer one). While a background
    write is in flight, pending SIGUSR1s wait for it: those that came before its ``.json``
    are answered by it. A stop is never answered by an earlier step's checkpoint: it
    writes one at this step (after the write in flight), waited for, like the final one."""
    stop = False
    written = saved_step == state.step
    failed = False
    during_write = False
    if ckpt.busy:
        must_wait = reason is not None or signals.stop_pending
        done = ckpt.collect(wait=must_wait)
        if done is None:
            return False                  # still writing: what is pending waits for it
        if done.ok:                       # what came before its .json is answered by it
            stop = _log_signals(state, out, signals.take(done.mark), during_write=True).stop
    covered_until: int | None = None        # take everything that has arrived
    while True:
        requests = _log_signals(state, out, signals.take(covered_until), during_write)
        stop = stop or requests.stop
        if (requests or stop) and reason is None:
            reason = "signal"
        if reason is not None and not written:
            continues = not stop and reason != "final"
            done = ckpt.save(reason, wait=not continues)
            if done is None:
                return False                  # in the background: collected at a later boundary
            failed, written, during_write = not done.ok, True, True
            covered_until = done.mark
            continue
        if not signals.stop_pending:
            if failed and (stop or reason == "final"):
                raise SafetyStop(f"the {'final' if reason == 'final' else 'stop'} checkpoint at step {state.step} "
                                 f"could not be written; {resume_hint(out.run_dir)}")
            return stop
        covered_until = None


def _final_timing(ckpt: Checkpointer) -> dict[str, float]:
    """How long the final checkpoint took, waiting for a write in flight included: what a
    scheduler's grace period after SIGTERM (SLURM's KillWait) must cover."""
    done = ckpt.last
    return {} if done is None else {"checkpoint_s": round(done.waited_s + done.write_s, 3)}


def _device_memory(state: TrainingState) -> dict[str, int]:
    """On CUDA, this process's peak memory on its device: what a larger batch or model has to fit beside."""
    if state.device.type != "cuda":
        return {}
    return {"cuda_peak_allocated": torch.cuda.max_memory_allocated(state.device),
            "cuda_peak_reserved": torch.cuda.max_memory_reserved(state.device)}


def _took(ckpt: Checkpointer) -> str:
    timing = _final_timing(ckpt)
    return f" (the final checkpoint took {timing['checkpoint_s']:.2f} s)" if timing else ""


def _log_signals(state: TrainingState, out: RunOutputs, requests: SignalRequests,
                 during_write: bool) -> SignalRequests:
    for name in requests.names:
        action = "stop" if name in STOP_NAMES else "checkpoint"
        out.event(EVENT_SIGNAL, state.step, f"{name} received: {action} at step {state.step}",
                  signal=name, action=action, during_checkpoint=during_write)
    return requests


def _diverged(state: TrainingState, out: RunOutputs, ckpt: Checkpointer, guard: NonfiniteGuard) -> None:
    """``run.max_nonfinite`` non-finite steps in a row: checkpoint the last good state and stop."""
    good = guard.last_good_step
    what = f"weights, m and v of step {good}" if good is not None else "the weights it started from"
    done = ckpt.save("nonfinite", wait=True)
    if done is not None and done.ok:
        saved = f"the checkpoint at step {state.step} holds {what} (every update since was skipped)"
    else:
        saved = f"no checkpoint could be written; {resume_hint(out.run_dir)}"
    message = (f"{guard.in_a_row} non-finite steps in a row (run.max_nonfinite = {guard.limit}): the run diverged; "
               f"{saved}; lower the learning rate or resume from an earlier checkpoint")
    out.event(EVENT_STOP, state.step, f"stopping: {message}", reason=STOP_NONFINITE, in_a_row=guard.in_a_row,
              last_good_step=good)
    raise SafetyStop(message)
