"""Shared fixtures: run directories come from tests/rundirs.py only."""

from __future__ import annotations

import contextlib
import signal
import warnings

import pytest

from console.read.cache_dir import CACHE_ENV
from tests.netfs import missing_requirements, mounted
from tests.processes import stop_processes_naming
from tests.rundirs import RunSpec, make_run


@pytest.fixture(autouse=True)
def no_process_left_running(request):
    """After each test with a tmp_path: no process still names that directory (a trainer
    the test started and did not stop would run on, slowing every later test). One still
    there after a few seconds (a torchrun agent takes a moment to follow its workers out)
    is stopped, and the run's warnings say which test left it."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        for command in stop_processes_naming(tmp, grace=10.0, settle=5.0):
            warnings.warn(f"{request.node.nodeid} left a process running (stopped now): {command}")


# The signals whose disposition a child process inherits when it is ignored or blocked: a test
# that leaves one so in the test process (a run that ended on a stop ignores further stops, as
# a process about to exit does; a library's C code may block or ignore one behind Python's
# back) would hand every process started after it a Ctrl-C that does nothing.
_INHERITED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def _kernel_view() -> dict[str, int]:
    """Which of :data:`_INHERITED` the kernel has this process ignore and block (its own view,
    which C code can change without Python's handlers showing it)."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines()
                  if line.startswith(("SigIgn:", "SigBlk:")))
    ours = sum(1 << (sig - 1) for sig in _INHERITED)
    return {name: int(value, 16) & ours for name, value in fields.items()}


_AT_START = ({sig: signal.getsignal(sig) for sig in _INHERITED}, _kernel_view())


@pytest.fixture(autouse=True)
def signal_handlers_put_back(request):
    """After each test: the signal handlers of this process, and the kernel's view of them, as
    they were when the tests began, and a warning naming the test that changed them."""
    yield
    handlers, kernel = _AT_START
    now = {sig: signal.getsignal(sig) for sig in _INHERITED}
    if now != handlers or _kernel_view() != kernel:
        warnings.warn(f"{request.node.nodeid} left the signal handlers changed ({now}, {_kernel_view()}): "
                      "put back")
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _INHERITED)


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path_factory, monkeypatch):
    """Each test its own cache (the history mirrors), never the user's, in this process and
    in every process it starts."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def run_dir(tmp_path):
    """A healthy generated run: 300 steps, checkpoints at 100/200/300, three arms."""
    return make_run(tmp_path / "run")


@pytest.fixture
def make_run_dir(tmp_path):
    """Factory: ``make_run_dir(name, **RunSpec fields)``."""

    def factory(name: str = "run", **overrides):
        return make_run(tmp_path / name, RunSpec(**overrides))

    return factory


@pytest.fixture
def mount_netfs(tmp_path):
    """Factory: ``mount_netfs(**options) -> (backing_dir, mount_dir)``, an NFS-like FUSE mount
    (tests/netfs.py: ``refuse_flock``, ``attr_timeout``, ``nul_window``) of a fresh backing
    directory, unmounted after the test however it ends. ``mount_netfs(backing, **options)``
    mounts an existing backing directory again: a second client, which sees the first one's
    appends as NULs for ``nul_window`` (a mount's own writes read back as written). Skips,
    naming what is missing, where FUSE or mfusepy is not there."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the NFS-like test filesystem cannot mount here: {missing}")
    with contextlib.ExitStack() as stack:

        def mount(backing=None, **options):
            index = len(list(tmp_path.glob("netfs-mount-*")))
            if backing is None:
                backing = tmp_path / f"netfs-backing-{index}"
                backing.mkdir()
            mount_dir = stack.enter_context(mounted(backing, tmp_path / f"netfs-mount-{index}", **options))
            return backing, mount_dir

        yield mount


@pytest.fixture
def netfs(mount_netfs):
    """``(backing_dir, mount_dir)``: a mount that behaves like an NFS client without a lock
    manager: flock refused, attributes cached for 1 s, appended bytes NUL for 1 s."""
    return mount_netfs(refuse_flock=True, attr_timeout=1.0, nul_window=1.0)


# -- the reliability figures ---------------------------------------------------------
# Fault-injection and fuzz tests report counts (kills survived, fuzz cases, bad inputs
# refused) through ``reliability_report``; the run ends with them in a summary section.
# Under xdist each worker hands its figures to the controller in ``workeroutput``.

_FIGURES: list[tuple[str, dict]] = []


@pytest.fixture(scope="session")
def reliability_report():
    """``reliability_report(name, **counts)``: a line in the end-of-run reliability summary."""

    def add(name: str, **counts) -> None:
        _FIGURES.append((name, counts))

    return add


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reliability"] = list(_FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _FIGURES.extend(tuple(item) for item in getattr(node, "workeroutput", {}).get("reliability", []))


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("reliability figures")
    for name, counts in sorted(_FIGURES, key=lambda item: item[0]):
        terminalreporter.write_line(f"{name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
