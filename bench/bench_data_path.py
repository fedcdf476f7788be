"""The way one history line goes, from the trainer's append to a plotted column, traced.

Not a timing: the functions a new step line passes through, recorded by a profiler while
the real pieces run in this process. The trainer's outputs append a step (through
``RunOutputs.step``), and the dashboard (a real app, headless) reads it and plots it. At
four moments the project's frames on the stack are taken:

1. the trainer's write of the line (``LossHistoryWriter.append``);
2. the reader thread's landing of it in a column (``Columns.extend``);
3. the UI thread handing the snapshot to the plot (``LossPlot.show``);
4. the plot's envelope of the column (``plot.envelope``).

The way is those four stacks, each from where the line's data enters it, outermost frame
first. A hop is a call from one module into another; a call within a module is not one.
The way changes hands three times, each counted as a hop: the file between 1 and 2, the
``SnapshotReady`` message between 2 and 3, the refresh between 3 and 4. A *return* is a
module entered again after the way had left it. Not counted: on the reader's thread the
columns go back up its stack as the snapshot's history view (the reader is pulled, not
pushed). Target (the typed-model issue): at most 10 hops, no return.

``python -m bench data_path`` prints the way; docs/architecture.md's "The data's way" is drawn from it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "rundir", "trainer")
SINKS = {("rundir/history/writer.py", "append"): "write", ("rundir/history/columns.py", "extend"): "column",
         ("console/tui/widgets/loss_plot.py", "show"): "show", ("console/plot/envelope.py", "envelope"): "envelope"}
HAND_OVERS = {"column": "the file", "show": "SnapshotReady", "envelope": "refresh"}
MAX_HOPS = 10


def _project_file(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return rel if rel.split("/", 1)[0] in PACKAGES else None


def _stack(frame: FrameType | None) -> list[tuple[str, str]]:
    """The project's frames on the stack, outermost first: (module file, function)."""
    out = []
    while frame is not None:
        rel = _project_file(frame.f_code.co_filename)
        if rel is not None:
            out.append((rel, frame.f_code.co_qualname))
        frame = frame.f_back
    return out[::-1]


class Tracer:
    """Records the stack at each sink; armed only while the new line travels."""

    def __init__(self) -> None:
        self.armed = False
        self.stacks: dict[str, list[tuple[str, str]]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not self.armed:
            return
        rel = _project_file(frame.f_code.co_filename)
        sink = SINKS.get((rel, frame.f_code.co_name)) if rel else None
        if sink is not None:
            with self.lock:
                self.stacks[sink] = _stack(frame)      # the newest: the new line's


def trace_way(run_dir: Path) -> list[tuple[str, str]]:
    """Append one step to ``run_dir`` as the trainer does and follow it to the plot."""
    from console.tui.app import ConsoleApp
    from trainer.outputs import RunOutputs
    from trainer.progress import Progress

    tracer = Tracer()
    threading.setprofile(tracer)
    sys.setprofile(tracer)

    async def follow() -> None:
        app = ConsoleApp(run_dir, tick=None)
        async with app.run_test(size=(160, 48)) as pilot:
            for _ in range(600):
                if app.snapshot is not None:
                    break
                await pilot.pause(0.05)
            last = app.snapshot.history.last_step or 0
            progress = Progress(run_dir, 1000)
            outputs = RunOutputs(run_dir, progress, 4, last)
            tracer.armed = True
            outputs.step(last + 1, 2.5, 1e-3, 0.5, "stdlib-code", 1024 * (last + 1))
            outputs.close()
            progress.close()
            for _ in range(1200):
                await pilot.pause(0.05)
                if {"write", "column", "show", "envelope"} <= tracer.stacks.keys():
                    break
            tracer.armed = False

    try:
        asyncio.run(follow())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)   # type: ignore[arg-type]
    missing = {"write", "column", "show", "envelope"} - tracer.stacks.keys()
    if missing:
        raise RuntimeError(f"the new line was not seen at: {', '.join(sorted(missing))}")
    way: list[tuple[str, str]] = []
    for sink in ("write", "column", "show", "envelope"):
        if sink in HAND_OVERS:
            way.append(("", HAND_OVERS[sink]))
        way.extend(_from_entry(tracer.stacks[sink], sink))
    return way


def _from_entry(stack: list[tuple[str, str]], sink: str) -> list[tuple[str, str]]:
    """The stack from where the data enters it: the trainer's outputs for the write, the
    reader's read for the column (the app's read loop only calls it), the app's handler of
    the snapshot for the show, the plot's drawing for the envelope."""
    entry = {"write": "RunOutputs.step", "column": "RunReader.read", "show": "ConsoleApp.on_snapshot_ready",
             "envelope": "LossPlot.render_line"}[sink]
    names = [name for _, name in stack]
    return stack[names.index(entry):] if entry in names else stack


def count(way: list[tuple[str, str]]) -> tuple[int, int, list[str]]:
    """(hops, returns to a module already left, the modules in order). A hop is a call from
    one module into another, or a hand-over (the file, the message, the refresh); a call
    within a module is not one: a module's helpers are its own business."""
    hops = sum(1 for rel, _ in way if not rel)
    hops += sum(1 for (a, _), (b, _) in zip(way, way[1:]) if a and b and a != b)
    modules: list[str] = []
    for rel, _ in way:
        if rel and (not modules or modules[-1] != rel):
            modules.append(rel)
    returns = sum(1 for i, m in enumerate(modules) if m in modules[:i])
    return hops, returns, modules


def run() -> list[Result]:
    from tests.rundirs import make_run

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = make_run(Path(tmp) / "run", steps=2000, checkpoints=(1000, 2000))
        way = trace_way(run_dir)
    hops, returns, modules = count(way)
    for rel, name in way:
        print(f"  {name:<44} {rel or '(hand-over)'}", file=sys.stderr)
    print(f"  {len(way) - 1} calls, {hops} hops across {len(modules)} modules, {returns} return(s) to a module "
          "already left; the columns then go back up the reader's stack as the snapshot's history view",
          file=sys.stderr)
    return [Result("data_path", "hops (module to module) from the trainer's append to a plotted column", hops,
                   "hops", target=f"<= {MAX_HOPS}", met=hops <= MAX_HOPS),
            Result("data_path", "calls on that way (every function)", len(way) - 1, "calls"),
            Result("data_path", "returns to a module already left", returns, "returns", target="0",
                   met=returns == 0)]

if __name__ == "__main__":
    run()
