"""``andrea-train RUN_DIR --nproc N [--nnodes M --rdzv-endpoint HOST:PORT --rdzv-id ID]``:
torchrun's agent, in this process, with the signals a cluster sends it answered.

This process is the launcher: the one a batch script ``exec``s, ``srun`` starts, a shell
or the console runs. It runs torch's elastic agent (``torch.distributed.run``'s own
configuration, :class:`LocalElasticAgent` subclassed) and starts one worker per process,
``python -u -m trainer RUN_DIR ...``, each in a session of its own (so no signal sent to
the launcher's session or job step reaches them). What reaches the launcher is passed on,
at the agent's monitoring tick (every 0.1 s; the handlers only set flags):

- **SIGTERM, SIGINT**: to every worker of this node. The ranks agree on one step (they
  all-reduce their flags), rank 0 writes the final checkpoint, every worker exits 0, and
  so does the launcher: a stopped job ends COMPLETED 0:0. (torchrun itself raises on the
  signal, kills its workers after 30 s and exits 1.) Nothing kills the workers after a
  grace period; the scheduler's own SIGKILL (``KillWait``) is the backstop. Each is passed
  on once (a stop cannot be undone; the scheduler may send it again, to every process).
  Once a stop has reached the launcher or a worker, further ones are ignored while it exits:
  a stop that lands after the handlers are gone must not turn a clean exit into a kill.
- **SIGUSR1**: to rank 0's worker, when it runs on this node and ``.trainer.json`` names it
  (verified: the recorded pid is our own child, started when the record says). It
  checkpoints and the others follow. A launcher without rank 0 ignores it, so a signal to
  every launcher of a job (``scancel --signal=USR1 JOB.STEP``) is one request. Workers
  start with SIGUSR1 ignored until they install their own handler.

Until the workers are started (the rendezvous), SIGTERM and SIGINT end the launcher as
usual, and SIGUSR1 is ignored. The exit status is 0 when every worker exited 0; else the
status of the first worker that failed (2 bad input, 3 a safety stop), or 1 for a worker
killed by a signal.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from typing import Any, Sequence

import psutil

from rundir import read_trainer_record
from rundir.text import counted
from rundir.trainer_record import process_start

FORWARDED_STOP = (signal.SIGTERM, signal.SIGINT)
# Flags of andrea-train that configure the launcher, not the workers: (flag, takes a value).
LAUNCHER_FLAGS = ("--nproc", "--nnodes", "--rdzv-endpoint", "--rdzv-id", "--local-addr")
# torch's handlers (which raise SignalException and end the agent) only for these: the
# launcher answers SIGTERM, SIGINT and SIGUSR1 itself.
TORCH_HANDLED = "SIGHUP,SIGQUIT"


def worker_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` without the launcher's own flags (``--nproc N``, ``--nnodes=M`` ...)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LAUNCHER_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in LAUNCHER_FLAGS)):
            out.append(arg)
    return out


def torchrun_arguments(argv: Sequence[str], nproc: int, nnodes: str | None = None, endpoint: str | None = None,
                       rdzv_id: str | None = None, local_addr: str | None = None) -> list[str]:
    """torchrun's command line for these workers: ``--standalone`` on one node (a private
    rendezvous on a free port, so several runs on one machine never collide), else a c10d
    rendezvous at ``endpoint`` shared by every node's launcher (``local_addr``: where the
    others reach this node, when its host name does not say)."""
    where = ["--standalone"] if not nnodes else [
        f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}",
        *([f"--local-addr={local_addr}"] if local_addr else [])]
    return [*where, f"--nproc_per_node={nproc}", "-m", "trainer", *worker_argv(argv)]


class LaunchRequests:
    """The signals that reached the launcher and are not passed on yet (handlers append)."""

    def __init__(self) -> None:
        # The handler only appends; take() only reads up to an index and remembers it, so a
        # signal landing inside take() is never lost.
        self._arrived: list[signal.Signals] = []
        self._seen = 0
        self._previous: dict[signal.Signals, Any] = {}

    def handle(self, signum: int, frame: Any) -> None:
        self._arrived.append(signal.Signals(signum))     # only a flag: the agent's tick acts

    def take(self) -> list[signal.Signals]:
        """The signals that arrived since the last call, in order."""
        end = len(self._arrived)
        new, self._seen = self._arrived[self._seen:end], end
        return new

    def install(self, signals: Sequence[signal.Signals]) -> None:
        for sig in signals:
            previous = signal.signal(sig, self.handle)
            self._previous.setdefault(sig, previous)

    @property
    def stopped(self) -> bool:
        """A SIGTERM or SIGINT reached the launcher."""
        return any(sig in FORWARDED_STOP for sig in self._arrived)

    def restore(self) -> None:
        """The previous handlers back; after a stop, SIGTERM and SIGINT are ignored instead
        while the launcher exits (the scheduler may send the same stop again, to every
        process of the step: a clean exit must stay one)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.stopped and sig in FORWARDED_STOP else handler)
        self._previous.clear()


def _agent_class():
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    class ForwardingAgent(LocalElasticAgent):
        """torch's local agent, passing the launcher's signals on to its workers."""

        def __init__(self, *args: Any, run_dir: str, requests: LaunchRequests, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.run_dir = run_dir
            self.requests = requests
            self.usr1_waiting = False          # a SIGUSR1 for rank 0, until .trainer.json names it
            self.passed_on: set[signal.Signals] = set()     # a stop is passed on once: it cannot be undone

        def _start_workers(self, worker_group):
            # Before the first worker exists, so that no stop can end this process and leave
            # them running; a handler's disposition is not inherited (exec resets it), so the
            # workers start with SIGTERM/SIGINT at their default action. They inherit "ignored"
            # for SIGUSR1: one that comes before their own handler is lost, never fatal.
            self.requests.install(FORWARDED_STOP)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            try:
                return super()._start_workers(worker_group)
            finally:
                self.requests.install([signal.SIGUSR1])

        def _monitor_workers(self, worker_group):
            self._pass_on(worker_group)
            return super()._monitor_workers(worker_group)

        def _pass_on(self, worker_group) -> None:
            for sig in self.requests.take():
                if sig == signal.SIGUSR1:
                    self.usr1_waiting = True
                    continue
                if sig in self.passed_on:
                    continue
                self.passed_on.add(sig)
                pids = [w.id for w in worker_group.workers]
                sent = [pid for pid in pids if _signal_child(pid, sig)]
                _say(f"{sig.name}: passed on to {counted(len(sent), 'worker')} on this node "
                     f"(pid {', '.join(map(str, sent))})")
            if self.usr1_waiting:
                rank0 = next((w.id for w in worker_group.workers if w.global_rank == 0), None)
                if rank0 is None:
                    self.usr1_waiting = False
                    _say("SIGUSR1: rank 0 runs on another node: not passed on here (its own launcher passes one)")
                elif _records(self.run_dir, rank0) and _signal_child(rank0, signal.SIGUSR1, group=False):
                    self.usr1_waiting = False
                    _say(f"SIGUSR1: passed on to rank 0 (pid {rank0})")

    return ForwardingAgent


def _say(text: str) -> None:
    print(f"andrea-train (launcher): {text}", file=sys.stderr, flush=True)


def _signal_child(pid: Any, sig: signal.Signals, group: bool = True) -> bool:
    """Signal a worker (its process group: its own session) if it is still our child (a pid
    the agent has reaped could have been reused by another process)."""
    try:
        if not isinstance(pid, int) or psutil.Process(pid).ppid() != os.getpid():
            return False
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    except (psutil.Error, ProcessLookupError, PermissionError):
        return False


def _records(run_dir: str, pid: int) -> bool:
    """``.trainer.json`` names our worker ``pid`` (it records itself once its handlers are in)."""
    record, _ = read_trainer_record(run_dir)
    if record is None or record.pid != pid:
        return False
    try:
        return record.is_process(process_start(psutil.Process(pid)))
    except psutil.Error:
        return False


def launch(run_dir: str, argv: Sequence[str], nproc: int, nnodes: str | None = None, endpoint: str | None = None,
           rdzv_id: str | None = None, local_addr: str | None = None) -> int:
    """Run the workers under the agent in this process; the launcher's exit status."""
    import torch.distributed.elastic.rendezvous.registry as rdzv_registry
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.run import config_from_args, parse_args

    args = parse_args(torchrun_arguments(argv, nproc, nnodes, endpoint, rdzv_id, local_addr))
    if args.standalone:                     # as torchrun does it (torch.distributed.run.run)
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    config, entrypoint, entry_args = config_from_args(args)
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = TORCH_HANDLED
    rdzv = RendezvousParameters(backend=config.rdzv_backend, endpoint=config.rdzv_endpoint, run_id=config.run_id,
                                min_nodes=config.min_nodes, max_nodes=config.max_nodes, local_addr=config.local_addr,
                                **config.rdzv_configs)
    spec = WorkerSpec(role=config.role, local_world_size=config.nproc_per_node, entrypoint=entrypoint,
                      args=tuple(entry_args), rdzv_handler=rdzv_registry.get_rendezvous_handler(rdzv),
                      max_restarts=config.max_restarts, monitor_interval=config.monitor_interval,
                      local_addr=config.local_addr)
    requests = LaunchRequests()
    previous_usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)     # never fatal, even before the workers
    agent = _agent_class()(spec=spec, logs_specs=config.logs_specs, start_method=config.start_method,
                           log_line_prefix_template=config.log_line_prefix_template,
                           shutdown_timeout=config.shutdown_timeout, run_dir=run_dir, requests=requests)
    try:
        result = agent.run()
    finally:
        requests.restore()
        signal.signal(signal.SIGUSR1, previous_usr1)
        spec.rdzv_handler.shutdown()
    if result is None or not result.is_failed():
        return 0
    for rank, failure in sorted(result.failures.items()):
        _say(f"rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}")
    first = min(result.failures.values(), key=lambda f: f.timestamp)
    return first.exitcode if first.exitcode > 0 else 1
