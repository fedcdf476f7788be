"""Processes that tests start and must not leave behind: found by the test's directory
in their command line (every test's run directories live under its own tmp_path)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil


def processes_naming(path: Path) -> list[psutil.Process]:
    """Live processes (not this one) with an argument that is ``path`` or lies under it."""
    prefix = str(path)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.info["pid"] == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        args = proc.info["cmdline"] or []
        if any(arg == prefix or arg.startswith(prefix + os.sep) for arg in args):
            found.append(proc)
    return found


def stop_processes_naming(path: Path, grace: float = 30.0, settle: float = 0.0) -> list[str]:
    """SIGTERM every process naming ``path`` that has not exited by itself within ``settle``
    seconds, SIGKILL what is left ``grace`` seconds later; returns their command lines."""
    procs = processes_naming(path)
    if settle and procs:
        _, procs = psutil.wait_procs(procs, timeout=settle)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return [" ".join(proc.info["cmdline"] or []) for proc in procs]


NOBODY = 65534


def run_as(uid: int, fn):
    """``fn()`` in a forked child that has given up root for ``uid`` (its group too): a real
    process of another user, running this test's code. What ``fn`` returns must be JSON;
    modules it needs are imported before the call, so the child reads nothing from a
    directory that user may not enter. Needs root."""
    import json

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                             # the child: never returns
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(write_fd, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        answer = fh.read()
    os.waitpid(pid, 0)
    return json.loads(answer)


def until(condition, timeout: float = 60.0, what: str = "") -> None:
    """Wait for ``condition()`` to hold, failing the test (naming ``what``) once ``timeout``
    has passed: a ceiling on the event's wait, never the wait itself."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what or condition}")
