"""Who trains a run directory: the verified trainer and what it costs (CPU%, RSS, GPU memory)."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import psutil

from rundir import TrainerRecord, Verification, verify_trainer

from ..model.format import printable
from ..model.snapshot import TRAINER_LABELS, TrainerView


def _slurm(v: Verification) -> dict[str, str] | None:
    recorded = v.record.slurm if v.record else None
    if recorded is None:
        return None
    job = recorded.to_dict()
    if v.job is not None:
        job.update(state=v.job.state, run_time=v.job.run_time, time_limit=v.job.time_limit)
    return job


def _suspended(status: str, pid: int) -> str | None:
    """Why a live process makes no progress when the kernel has stopped it; None otherwise."""
    if status == psutil.STATUS_STOPPED:
        return f"stopped by a signal (state T: SIGSTOP or Ctrl-Z); kill -CONT {pid} resumes it"
    if status == psutil.STATUS_TRACING_STOP:
        return "stopped by a debugger (state t)"
    return None


class TrainerProbe:
    """Verifies ``.trainer.json`` and measures the verified process (CPU%, RSS, GPU memory).

    Stateful because psutil's ``cpu_percent`` compares with the previous call. Tests
    replace it with a callable returning a fixed :class:`TrainerView`.
    """

    GPU_EVERY_S = 5.0

    def __init__(self) -> None:
        self._proc: psutil.Process | None = None
        self._key: TrainerRecord | None = None
        self._nvidia_smi = shutil.which("nvidia-smi")
        self._gpu: tuple[float, dict[int, int]] = (0.0, {})

    def __call__(self, run_dir: Path) -> TrainerView:
        v = verify_trainer(run_dir)
        rec = v.record
        label = TRAINER_LABELS.get(v.state, v.state)
        if v.state == "remote" and rec is not None:
            label = f"on {printable(rec.host, 40)}"
        view = TrainerView(state=v.state, label=label, reason=v.reason,
                           pid=rec.pid if rec else None,
                           started=(rec.started or rec.create_time) if rec else None,
                           argv=tuple(rec.argv) if rec else (), slurm=_slurm(v))
        if not v.ok or rec is None or v.via_slurm:       # a pid on another node is not measured here
            self._proc = self._key = None
            return view
        try:
            if not rec.same_trainer(self._key):
                self._proc = psutil.Process(rec.pid)
                self._key = rec
                self._proc.cpu_percent(None)            # primes the next reading
                cpu = None
            else:
                assert self._proc is not None
                cpu = self._proc.cpu_percent(None)
            rss = self._proc.memory_info().rss
            status = self._proc.status()
        except psutil.Error:
            return view
        return replace(view, cpu_percent=cpu, rss=rss, gpu_memory=self._gpu_memory(rec.pid),
                       suspended=_suspended(status, rec.pid))

    def _gpu_memory(self, pid: int) -> int | None:
        if not self._nvidia_smi:
            return None
        stamp, table = self._gpu
        if time.monotonic() - stamp > self.GPU_EVERY_S:
            table = {}
            try:
                out = subprocess.run([self._nvidia_smi, "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=2).stdout
                for line in out.splitlines():
                    p, _, mib = line.partition(",")
                    if p.strip().isdigit() and mib.strip().isdigit():
                        table[int(p)] = table.get(int(p), 0) + int(mib) * (1 << 20)
            except (OSError, subprocess.SubprocessError):
                self._nvidia_smi = None
            self._gpu = (time.monotonic(), table)
        return table.get(pid)
