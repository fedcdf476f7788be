"""A rank's heartbeat: its record (``.rank-NNNNN.json``) kept fresh by a thread, and its answer to
a request for its Python stacks (docs/contract.md#the-ranks-records).

The training loop only stamps times (:meth:`RankHeartbeat.batch_drawn`, :meth:`work_done`,
:meth:`step_done`: a clock read and a few float operations each); the thread writes. It writes
the record every :data:`rundir.ranks.HEARTBEAT_S` seconds, atomically and without fsync, through
any wait of the main thread (a collective, a checkpoint, C code), and between writes looks for
``.stacks-request.json`` every :data:`STACKS_POLL_S` seconds (one ``stat``). A request it has not
answered yet is answered with ``faulthandler.dump_traceback(all_threads=True)`` into
``.stacks-NNNNN.txt``, atomically: no signal, no ptrace, and it works while the main thread
holds no GIL-releasing point of its own (faulthandler reads the frames without the GIL).
"""

from __future__ import annotations

import faulthandler
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from .atomic import atomic_write_json, create_temp
from .fence import LockLostError
from .layout import STACKS_REQUEST, rank_record_name, stacks_answer_name
from .ranks import HEARTBEAT_S, RankRecord
from .safe_read import read_json_object
from .trainer_record import read_boot_id, read_start_ticks

EMA = 0.9                       # smoothing of the step times
STACKS_POLL_S = 0.2
STACKS_REQUEST_MAX = 4096
STACKS_HEADER = "# stacks"      # an answer's first line: "# stacks id=ID rank=R pid=P host=H time=T"


class RankHeartbeat:
    """One rank's record and stacks watchdog. :meth:`start` writes the first record and starts
    the thread; :meth:`close` stops it and writes the last record with the exit code."""

    def __init__(self, run_dir: str | os.PathLike[str], rank: int, world_size: int, local_rank: int, launch: str,
                 gpu: Callable[[], dict[str, Any]] | None = None, interval: float = HEARTBEAT_S):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / rank_record_name(rank)
        self.rank, self.world_size, self.local_rank, self.launch = rank, world_size, local_rank, launch
        self.interval = interval
        self.gpu = gpu
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.boot_id = read_boot_id()
        self.start_ticks = read_start_ticks(self.pid)
        self.started = time.time()
        self.proc = psutil.Process()
        self.write_errors = 0
        self.answered: str | None = None            # the id of the last stacks request answered
        # Stamped by the training loop (plain attribute writes: the thread reads them as they are).
        self.step: int | None = None
        self.step_time: float | None = None
        self.step_s: float | None = None
        self.work_s: float | None = None
        self.data_s: float | None = None
        self._begin = self._drawn = self._last_done = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop's stamps ------------------------------------------------------------
    def step_begins(self) -> None:
        self._begin = time.perf_counter()

    def batch_drawn(self) -> None:
        self._drawn = now = time.perf_counter()
        self.data_s = _ema(self.data_s, now - self._begin)

    def work_done(self) -> None:
        """The forward pass is done: the rank's own work before the gradients are exchanged."""
        self.work_s = _ema(self.work_s, time.perf_counter() - self._begin)

    def step_done(self, step: int) -> None:
        now = time.perf_counter()
        if self._last_done:
            self.step_s = _ema(self.step_s, now - self._last_done)
        self._last_done = now
        self.step, self.step_time = step, time.time()

    # -- the thread -------------------------------------------------------------------
    def start(self) -> "RankHeartbeat":
        self.proc.cpu_percent(None)
        self.write()
        self._thread = threading.Thread(target=self._run, name=f"rank-heartbeat-{self.rank}", daemon=True)
        self._thread.start()
        return self

    def close(self, exit_code: int | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.write(exit_code)

    def record(self, exit_code: int | None = None) -> RankRecord:
        try:
            cpu: float | None = self.proc.cpu_percent(None)
            rss: int | None = self.proc.memory_info().rss
        except psutil.Error:
            cpu = rss = None
        gpu = {}
        if self.gpu is not None:
            try:
                gpu = {k: v for k, v in self.gpu().items() if isinstance(v, (int, float))}
            except Exception:       # a GPU sampler's failure never stops the heartbeat
                gpu = {}
        return RankRecord(rank=self.rank, world_size=self.world_size, local_rank=self.local_rank, host=self.host,
                          pid=self.pid, launch=self.launch, heartbeat=time.time(), started=self.started,
                          start_ticks=self.start_ticks, boot_id=self.boot_id, step=self.step,
                          step_time=self.step_time, step_s=self.step_s, work_s=self.work_s, data_s=self.data_s,
                          cpu_percent=cpu, rss=rss, gpu=gpu, exit_code=exit_code)

    def write(self, exit_code: int | None = None) -> None:
        try:
            atomic_write_json(self.path, self.record(exit_code).to_dict(), durable=False)
        except OSError:
            self.write_errors += 1          # a full disk or a vanished directory: the next beat tries again
        except LockLostError:
            self.write_errors += 1          # rank 0's lock may be lost: it writes nothing more (rundir.fence)

    def _run(self) -> None:
        next_write = time.monotonic() + self.interval
        while not self._stop.wait(STACKS_POLL_S):
            self.answer_stacks()
            if time.monotonic() >= next_write:
                self.write()
                next_write = time.monotonic() + self.interval

    def answer_stacks(self) -> bool:
        """Answer a stacks request not answered yet; whether one was answered."""
        path = self.run_dir / STACKS_REQUEST
        try:
            os.stat(path)
        except OSError:
            return False
        read = read_json_object(path, STACKS_REQUEST_MAX)
        request_id = read.value.get("id") if read.ok and read.value else None
        if not isinstance(request_id, str) or not request_id or request_id == self.answered:
            return False
        self.answered = request_id
        try:
            write_stacks(self.run_dir, self.rank, request_id)
        except OSError:
            self.write_errors += 1
            return False
        return True


class NoHeartbeat:
    """The stamps of a process that keeps no record (one process alone): they do nothing."""

    def step_begins(self) -> None:
        pass

    def batch_drawn(self) -> None:
        pass

    def work_done(self) -> None:
        pass

    def step_done(self, step: int) -> None:
        pass


NO_HEARTBEAT = NoHeartbeat()


def write_stacks(run_dir: Path, rank: int, request_id: str) -> Path:
    """Every thread's Python stack of this process into ``.stacks-NNNNN.txt``, atomically."""
    target = run_dir / stacks_answer_name(rank)
    fd, tmp = create_temp(target)
    try:
        header = (f"{STACKS_HEADER} id={request_id} rank={rank} pid={os.getpid()} host={socket.gethostname()} "
                  f"time={time.time():.3f}\n")
        os.write(fd, header.encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def _ema(old: float | None, value: float) -> float:
    return value if old is None else EMA * old + (1 - EMA) * value
