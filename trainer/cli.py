"""``andrea-train RUN_DIR``: train a run directory, resuming from its newest checkpoint.

    andrea-train RUN_DIR [--preset NAME] [--max-steps N] [--checkpoint-every N] [--eval-every N]
                 [--sample-every N] [--device auto|cpu|cuda] [--resume latest|PATH|none]
                 [--fresh-bandit] [--skip-batches N] [--seed N] [--threads N] [--nproc N]

Under ``torchrun`` (``WORLD_SIZE`` > 1) it trains with DistributedDataParallel, one
process per device: see :mod:`trainer.distributed`. ``--nproc N`` (and ``--nnodes``) makes
this process the workers' launcher, torchrun's agent in process: see :mod:`trainer.launch`.

Everything that could be wrong with the input (run.toml, the arms' data, the
checkpoint, another trainer on the directory) is checked *before* anything in the run
directory is touched: such a problem is one line on stderr and exit status 2.

Exit status: 0 when stopped by ``--max-steps`` or a signal (after its checkpoint), or
when there is nothing to do; 1 on an unexpected error; 2 on bad input; 3 when a safety
policy stopped it (the run diverged, or a checkpoint it had to write failed: see
:mod:`trainer.guard`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

import torch

from rundir import LossHistory, RunLock, TrainerRecord, remove_trainer_record, write_run_config, write_trainer_record
from rundir.atomic import remove_stale_temps
from rundir.checkpoint import arrays_checksum
from rundir.layout import EVENT_PIVOT, EVENT_RESUME, EVENT_START, EVENT_ZOMBIE, LOSS_JSON
from rundir.rank_heartbeat import RankHeartbeat
from rundir.retention import finish_interrupted_prune
from rundir.signals import RequestWatch, SignalFlags
from rundir.text import counted
from rundir.trainer_record import RunDirId, SlurmPlacement
from trainer.args import PROG, build_parser
from trainer.determinism import configure
from trainer.distributed import SINGLE, AgreedSignals, NullOutputs, Ranks
from trainer.guard import EXIT_SAFETY_STOP, SafetyStop
from trainer.held_dir import HeldRunDir
from trainer.outputs import RunOutputs
from trainer.preflight import BAD_INPUT, Plan, plan_and_lock, plan_run
from trainer.progress import Progress
from trainer.resume import build_state
from trainer.state import TrainingState, flat_moments, flat_weights
from trainer.train import train


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.prune:
        from trainer.prune import run_prune

        return run_prune(args)
    if args.dry_run:
        print(f"{PROG}: --dry-run goes with --prune (see --help)", file=sys.stderr)
        return 2
    ranks = Ranks.from_env()
    if (args.nproc > 1 or args.nnodes) and "LOCAL_RANK" not in os.environ:     # the launcher of the workers
        if bool(args.nnodes) != bool(args.rdzv_endpoint and args.rdzv_id):
            print(f"{PROG}: --nnodes, --rdzv-endpoint and --rdzv-id go together (see --help)", file=sys.stderr)
            return 2
        from trainer.launch import launch

        return launch(args.run_dir, sys.argv[1:] if argv is None else argv, args.nproc, args.nnodes,
                      args.rdzv_endpoint, args.rdzv_id, args.local_addr)
    if ranks.distributed:
        return _main_distributed(args, ranks)
    run_dir = Path(args.run_dir)
    lock = _run_lock(run_dir)
    try:
        plan = plan_and_lock(args, lock)
        if plan.nothing_to_do:
            print(plan.nothing_to_do, file=sys.stderr)
            return 0
    except BAD_INPUT as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    _say_lock_mode(lock)
    try:
        return _run(plan, args)
    finally:
        lock.release()


EXIT_LOCK_LOST = 4


def _lock_lost(why: str) -> None:
    """The lock file was taken over (this trainer was frozen longer than run.lock_stale_after,
    and another took the run): another trainer owns the directory now, so this one stops at
    once and writes nothing more, as a crash would; no checkpoint, no record removed (the
    record is the new holder's). Said on stderr, which a launched trainer's trainer.log holds."""
    print(f"{PROG}: {why}: stopping now, writing nothing more", file=sys.stderr, flush=True)
    os._exit(EXIT_LOCK_LOST)


def _run_lock(run_dir: Path) -> RunLock:
    return RunLock(run_dir, on_lost=_lock_lost)


def _say_lock_mode(lock: RunLock) -> None:
    if lock.mode == "file":
        print(f"{PROG}: flock is refused on this filesystem: the run is locked by {lock.owner_path.name}, "
              f"with a heartbeat (stale after {lock.stale_after:g} s)", file=sys.stderr, flush=True)


def _main_distributed(args: argparse.Namespace, ranks: Ranks) -> int:
    """One of torchrun's processes. Rank 0 plans and takes the lock exactly as a single
    process does (and writes a new run.toml); then it tells the others whether to go on
    and which checkpoint to resume from, and they plan from the same files. Nobody
    trains until every rank has planned without a problem; a problem is exit status 2
    on every rank, with the message on the rank that found it."""
    ranks.init()
    run_dir = Path(args.run_dir)
    lock = _run_lock(run_dir)
    try:
        plan: Plan | None = None
        verdict: dict[str, Any] = {}
        if ranks.writer:
            try:
                plan = plan_and_lock(args, lock, ranks.world_size)
                if plan.nothing_to_do:
                    verdict = {"exit": 0, "message": plan.nothing_to_do}
                else:
                    _say_lock_mode(lock)
                    if plan.create_run_toml:
                        write_run_config(run_dir, plan.config)      # the other ranks read it
                    # The launch every rank's record carries, and .trainer.json (rundir/ranks.py).
                    verdict = {"checkpoint": str(plan.checkpoint.path) if plan.checkpoint else None,
                               "launch": uuid.uuid4().hex}
            except BAD_INPUT as err:
                verdict = {"exit": 2, "message": f"{PROG}: {err}"}
        verdict = ranks.broadcast_json(verdict)
        if "exit" in verdict:
            if ranks.writer:
                print(verdict["message"], file=sys.stderr)
            return int(verdict["exit"])
        problem = None
        if not ranks.writer:
            try:
                plan = plan_run(argparse.Namespace(**{**vars(args), "resume": verdict["checkpoint"] or "none"}))
            except BAD_INPUT as err:
                problem = f"{PROG} (rank {ranks.rank}): {err}"
        if not ranks.all_true(problem is None):
            if problem:
                print(problem, file=sys.stderr)
            return 2
        assert plan is not None
        plan.device = ranks.device(plan.device)
        return _run(plan, args, ranks, str(verdict["launch"]))
    finally:
        lock.release()
        ranks.close()


def _run(plan: Plan, args: argparse.Namespace, ranks: Ranks = SINGLE, launch: str | None = None) -> int:
    """Under the lock: train (:func:`_run_rank`). Under torchrun every rank runs this and keeps
    its own record (``.rank-NNNNN.json`` of ``launch``), whose last write says how it ended,
    and answers stacks requests."""
    beat = _heartbeat(plan.run_dir, ranks, launch)
    code = 1
    try:
        code = _run_rank(plan, args, ranks, launch, beat)
        return code
    finally:
        if beat is not None:
            beat.close(code)


def _record_trainer(held: HeldRunDir, ranks: Ranks, launch: str | None) -> TrainerRecord:
    """``.trainer.json`` for this process. Under torchrun this is rank 0's worker: the process
    the console signals. Inside a SLURM job the record names the job too: a console on another
    node signals through it."""
    placement: dict[str, Any] = dict(rank=0, world_size=ranks.world_size, launcher_pid=os.getppid(),
                                     launch=launch) if ranks.distributed else {}
    record = TrainerRecord.for_this_process(slurm=SlurmPlacement.from_env(), run_dir=RunDirId.of_fd(held.fd),
                                            **placement)
    write_trainer_record(held.path, record)
    return record


def _run_rank(plan: Plan, args: argparse.Namespace, ranks: Ranks, launch: str | None,
              beat: RankHeartbeat | None) -> int:
    """Set up the outputs, build the state, train, clean up; under torchrun rank 0 alone records itself and writes."""
    # Before .trainer.json: a recorded trainer handles signals. Every rank handles them
    # (torchrun forwards SIGTERM and SIGINT to all) and all ranks agree on them.
    signals = AgreedSignals(SignalFlags(), ranks).install()
    run_dir = plan.run_dir
    pid = os.getpid()
    progress = out = held = None
    stopped_on_signal = False
    try:
        if not ranks.writer:
            stopped_on_signal = _run_other_rank(plan, ranks, signals, beat) == "signal"
            return 0
        # Held open from here on: the run's files are reached through it, so that the run
        # trains on (and checkpoints) in its directory wherever that is moved.
        held = HeldRunDir(plan.run_dir)
        run_dir = held.path
        if plan.create_run_toml:
            write_run_config(run_dir, plan.config)
        record = _record_trainer(held, ranks, launch)
        stale = remove_stale_temps(run_dir)       # temporaries of writers that died mid-write
        configure(plan.threads, plan.device, plan.config.run.strict_determinism)
        progress = Progress(run_dir, plan.config.run.log_every)
        signals.watch_requests(RequestWatch(run_dir, record, progress.message))   # a console on any node
        resume_step = plan.checkpoint.step if plan.checkpoint else 0
        out = RunOutputs(run_dir, progress, plan.config.samples.keep, resume_step, held)
        if stale:
            progress.message(f"removed {counted(len(stale), 'temporary file')} left by a writer that died: "
                             f"{', '.join(p.name for p in stale)}")
        history = LossHistory(run_dir / LOSS_JSON)
        history.refresh()
        unfinished = finish_interrupted_prune(run_dir, history.events)
        if unfinished:
            progress.message(f"finished a prune that was interrupted: removed {', '.join(p.name for p in unfinished)}")
        if plan.overrides and not plan.create_run_toml:
            progress.message(f"flags override run.toml for this process: {plan.overrides}")
        for name, reason in plan.zombies.items():
            out.event(EVENT_ZOMBIE, resume_step, f"zombie arm {name!r} dropped ({reason}); it is never pulled",
                      arm=name, reason=reason)
        # --fresh-bandit is the polish pivot's restart (docs/contract.md#the-polish-pivot): weights, m, v,
        # samplers and RNG resume; the bandit starts afresh under run.toml's caps and floors.
        state = build_state(plan.config, plan.arms, torch.device(plan.device), plan.checkpoint, plan.fresh_bandit,
                            ranks, plan.skip_batches)
        state.ddp = ranks.wrap(state.model, state.device)
        _announce(plan, state, out, history)
        if plan.fresh_bandit:
            _record_pivot(plan, out)
        _record_rollback(plan, out)
        reason = train(state, out, signals, plan.config.run.max_steps,
                       saved_step=resume_step if plan.checkpoint else None, beat=beat)
        stopped_on_signal = reason == "signal"
        progress.message(f"stopped ({reason}) at step {state.step}")
        return 0
    except SafetyStop as err:
        if progress is not None:
            progress.message(f"stopped by a safety policy: {err}")
        print(f"{PROG}: stopped: {err}", file=sys.stderr)
        return EXIT_SAFETY_STOP
    except Exception:
        text = traceback.format_exc()
        if progress is not None:
            progress.message(f"trainer failed:\n{text}")
        print(text, file=sys.stderr)
        return 1
    finally:
        if out is not None:
            out.close()
        if progress is not None:
            progress.close()
        if ranks.writer:
            remove_trainer_record(run_dir, pid)
        if held is not None:
            held.close()
        signals.restore(exiting_on_stop=stopped_on_signal)


def _heartbeat(run_dir: Path, ranks: Ranks, launch: str | None) -> RankHeartbeat | None:
    """This rank's record and stacks watchdog, started (a job of several processes only)."""
    if not ranks.distributed or not launch:
        return None
    return RankHeartbeat(run_dir, ranks.rank, ranks.world_size, ranks.local_rank, launch).start()


def _run_other_rank(plan: Plan, ranks: Ranks, signals: AgreedSignals, beat: RankHeartbeat | None) -> str:
    """A rank other than 0: the same state and loop, no writes but its own record
    (:class:`NullOutputs`); why it stopped."""
    configure(plan.threads, plan.device, plan.config.run.strict_determinism)
    state = build_state(plan.config, plan.arms, torch.device(plan.device), plan.checkpoint, plan.fresh_bandit, ranks,
                        plan.skip_batches)
    state.ddp = ranks.wrap(state.model, state.device)
    return train(state, NullOutputs(plan.run_dir), signals, plan.config.run.max_steps,
                 saved_step=plan.checkpoint.step if plan.checkpoint else None, beat=beat)


def _announce(plan: Plan, state: TrainingState, out: RunOutputs, history: LossHistory) -> None:
    """The ``start`` or ``resume`` event: what this process runs, and what it could not restore."""
    common = dict(preset=plan.config.run.preset, n_params=plan.config.model.n_params(), device=plan.device,
                  threads=torch.get_num_threads(), arms=list(plan.arms), overrides=plan.overrides,
                  max_steps=plan.config.run.max_steps, torch_version=torch.__version__, pid=os.getpid(),
                  world_size=state.ranks.world_size, precision=state.precision, compile=plan.config.run.compile,
                  adamw=state.optimizer.kernel)
    if plan.checkpoint is None:
        out.event(EVENT_START, 0, f"start: preset {plan.config.run.preset}, {common['n_params']:,} parameters, "
                              f"arms {', '.join(plan.arms)}, device {plan.device}", seed=plan.config.run.seed, **common)
        return
    ckpt = plan.checkpoint
    fresh = list(state.inexact)
    if ckpt.status == "foreign":
        fresh.insert(0, f"foreign checkpoint ({ckpt.reason}): samplers, RNG and bandit start fresh")
    rerun = None
    # The steps the process before logged after the checkpoint: up to the head (the newest step
    # line's); steps after it were abandoned by a rollback, not run by that process.
    if history.head_step is not None and history.head_step > ckpt.step:
        rerun = {"from": ckpt.step + 1, "to": history.head_step}
    exact = not fresh
    reset = list(state.reset)
    if exact and reset:         # say what was restored, so that a reset asked for does not read as a loss
        summary = ("exactly: weights, optimizer moments, data samplers and RNG restored bit for bit; "
                   "reset on purpose: " + "; ".join(reset))
    else:
        summary = ("exactly" if exact else "NOT exactly: " + "; ".join(fresh)) \
            + ("; reset on purpose: " + "; ".join(reset) if reset else "")
    note = f"; steps {rerun['from']}..{rerun['to']} after it are run again" if rerun else ""
    if plan.skip_batches:
        note += f"; each arm skips the windows of its next {plan.skip_batches} batches (--skip-batches)"
    # The checksum of what was loaded, computed as the .bin's is: equal to the .bin's
    # checksum exactly when weights, m and v were restored bit for bit.
    restored = arrays_checksum(ckpt.step, flat_weights(state.optimizer), *flat_moments(state.optimizer))
    out.event(EVENT_RESUME, ckpt.step, f"resume from {ckpt.path.name} {summary}{note}",
              restored_checksum=restored,
              from_step=ckpt.step, checkpoint=ckpt.path.name, exact=exact, fresh=fresh, reset=reset, rerun=rerun,
              fresh_bandit=plan.fresh_bandit, skip_batches=plan.skip_batches, **common)


def _record_pivot(plan: Plan, out: Any) -> None:
    """The ``pivot`` event, when this start is step 6 of a polish pivot: the journal says
    the new policy is written and names the checkpoint this process resumed from."""
    from rundir.pivot_files import policy_text, read_journal

    journal, _ = read_journal(plan.run_dir)
    step = plan.checkpoint.step if plan.checkpoint else None
    if journal is None or journal.stage != "config_written" or journal.final_step != step:
        return
    out.event(EVENT_PIVOT, step, f"polish pivot at step {step}: samples and bandit state archived to "
                             f"{journal.archive}; fresh bandit under [floor, cap] {policy_text(journal.new_policy)}",
              archive=journal.archive, policy=journal.new_policy, old_policy=journal.old_policy,
              dropped=journal.dropped, audit_step=journal.audit_step)


def _record_rollback(plan: Plan, out: Any) -> None:
    """The ``rollback`` event, when this start is step 3 of a guided rollback: the journal
    says the checkpoints after X are set aside and names this checkpoint and skip."""
    from rundir.layout import EVENT_ROLLBACK
    from rundir.rollback_files import read_rollback_journal

    journal, _ = read_rollback_journal(plan.run_dir)
    step = plan.checkpoint.step if plan.checkpoint else None
    if journal is None or journal.stage != "set_aside" or journal.to_step != step or \
            journal.skip_batches != plan.skip_batches:
        return
    spike = journal.spike or {}
    past = f" past the spike at step {spike['start']}" if "start" in spike else ""
    out.event(EVENT_ROLLBACK, step, f"rollback{past}: from step {journal.from_step} to step {step}, each arm "
                                    f"skipping {plan.skip_batches} batches; the checkpoints after it are in "
                                    f"{journal.archive}", from_step=journal.from_step, to_step=step,
              skip_batches=plan.skip_batches, spike=journal.spike, archive=journal.archive,
              set_aside=journal.set_aside)


if __name__ == "__main__":
    sys.exit(main())
