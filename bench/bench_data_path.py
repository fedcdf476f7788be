"""The way one history line goes, from the trainer's append to a plotted column, traced.

Not a timing: the functions a new step line passes through, recorded by a profiler while
the real pieces run in this process. The trainer's outputs append a step (through
``RunOutputs.step``), the dashboard (a real app, headless, watching the run) sees it, reads
it and plots it. At each place the line changes form, the project's frames on the stack are
taken (and the C scanner's call, which the profiler reports as one):

1. the trainer's write of the line (``LossHistoryWriter.append``);
2. the watcher's hand-over of the change to the paced reads (``PacedReads.request``);
3. the C scanner's read of the batch (``rundir._line_scan.scan``);
4. the batch's landing in the columns (``Columns.extend``);
5. the UI thread handing the snapshot to the plot (``LossPlot.show``);
6. the plot's envelope of the column (``plot.envelope``).

The way is those stacks walked in order: each from where the data enters it; between two
on one thread, up (returns) to the frame they share and down again, so a call that had
returned is seen; between threads, a hand-over (the file, the kinds the watcher hands the
read loop, the ``SnapshotReady`` message the read loop posts once the columns are back up its stack as
the snapshot's history view, the refresh). A hop is a call from one module into
another, or a hand-over from one module to another; a return gives the data back to a frame
already on the way and is not one, and a call or hand-over within a module is not one
either. A module *entered twice* is one the way enters again after it had gone on to
another (a return to a frame still on the way is no new entry). Target (the house issue):
at most 12 hops, no module entered twice.

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
SINKS = {("rundir/history/writer.py", "append"): "write", ("console/read/watcher.py", "request"): "watch",
         ("rundir/history/blocks.py", "read_into"): "bytes", ("rundir/history/columns.py", "extend"): "column",
         ("console/tui/widgets/loss_plot.py", "show"): "show", ("console/plot/envelope.py", "envelope"): "envelope"}
C_SCANNER = ("rundir/_line_scan.c", "scan")
ORDER = ("write", "watch", "bytes", "scan", "column", "show", "envelope")
# Where the data enters each stack, and what hands it over from the stack before (None: the
# same thread, walked up and down).
ENTRIES = {"write": "RunOutputs.step", "watch": "_follow_", "bytes": "PacedReads.drain", "scan": None,
           "column": None, "show": "ConsoleApp.on_snapshot_ready", "envelope": "LossPlot.render_line"}
HAND_OVERS = {"watch": "the file", "bytes": "the kinds asked for", "show": "SnapshotReady", "envelope": "refresh"}
# The frame that makes the hand-over, when the data first goes back up to it: the read loop
# posts the snapshot the reader returns (the columns, as its history view).
HANDED_FROM = {"show": "PacedReads.drain"}
MAX_HOPS = 12

Frame = tuple[str, str, int]            # module file, function, the frame's identity while it runs
Step = tuple[str, str, str]             # "call", "return" or "hand-over"; module file ("" for a hand-over); name


def _project_file(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return rel if rel.split("/", 1)[0] in PACKAGES else None


def _stack(frame: FrameType | None) -> list[Frame]:
    """The project's frames on the stack, outermost first."""
    out = []
    while frame is not None:
        rel = _project_file(frame.f_code.co_filename)
        if rel is not None:
            out.append((rel, frame.f_code.co_qualname, id(frame)))
        frame = frame.f_back
    return out[::-1]


class Tracer:
    """Records the stack at each sink, in :data:`ORDER` (a sink seen after a later one is of
    another read), and every call from one of the project's modules into another (for the
    calls beside the way); armed only while the new line travels. The watcher's sink counts
    only from its watch loop (the tick and the start-up ask for reads too)."""

    def __init__(self) -> None:
        self.armed = False
        self.stacks: dict[str, list[Frame]] = {}
        self.calls: list[tuple[Frame, str, str]] = []      # (caller, callee's module, callee)
        self.lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.armed or event not in ("call", "c_call"):
            return
        if event == "c_call":
            if getattr(arg, "__module__", None) != "rundir._line_scan":
                return
            sink, stack = "scan", _stack(frame) + [(*C_SCANNER, 0)]
        else:
            rel = _project_file(frame.f_code.co_filename)
            if rel is None:
                return
            stack = _stack(frame)
            if len(stack) > 1 and stack[-2][0] != rel:
                self.calls.append((stack[-2], rel, frame.f_code.co_qualname))
            sink = SINKS.get((rel, frame.f_code.co_name))
            if sink is None or (sink == "watch" and not any(name.startswith(ENTRIES["watch"]) for _, name, _ in stack)):
                return
        with self.lock:
            if any(later in self.stacks for later in ORDER[ORDER.index(sink) + 1:]):
                return
            self.stacks[sink] = stack          # the newest: the new line's


def trace_way(run_dir: Path) -> tuple[list[Step], list[tuple[str, str, str]]]:
    """Append one step to ``run_dir`` as the trainer does and follow it to the plot."""
    from console.tui.app import ConsoleApp
    from console.tui.options import ConsoleOptions
    from trainer.outputs import RunOutputs
    from trainer.progress import Progress

    tracer = Tracer()
    threading.setprofile(tracer)
    sys.setprofile(tracer)

    async def follow() -> None:
        app = ConsoleApp(run_dir, ConsoleOptions(tick=None))
        async with app.run_test(size=(160, 48)) as pilot:
            for _ in range(600):
                if app.snapshot is not None:
                    break
                await pilot.pause(0.05)
            await pilot.pause(1.0)              # the first read's follow-ups (start-up) are done
            last = app.snapshot.history.last_step or 0
            progress = Progress(run_dir, 1000)
            outputs = RunOutputs(run_dir, progress, 4, last)
            tracer.armed = True
            outputs.step(last + 1, 2.5, 1e-3, 0.5, "stdlib-code", 1024 * (last + 1))
            outputs.close()
            progress.close()
            for _ in range(1200):
                await pilot.pause(0.05)
                if set(ORDER) <= tracer.stacks.keys():
                    break
            tracer.armed = False

    try:
        asyncio.run(follow())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)   # type: ignore[arg-type]
    missing = set(ORDER) - tracer.stacks.keys()
    if missing:
        raise RuntimeError(f"the new line was not seen at: {', '.join(sorted(missing))}")
    stacks = [tracer.stacks[sink] for sink in ORDER]
    return walk(stacks), beside(stacks, tracer.calls)


def walk(stacks: list[list[Frame]]) -> list[Step]:
    """The way through the sinks' stacks (in :data:`ORDER`), as calls, returns and hand-overs."""
    way: list[Step] = []
    before: list[Frame] = []
    for sink, stack in zip(ORDER, stacks):
        entry = ENTRIES[sink]
        if entry is None:                       # the same thread: up to the frame they share, then down
            start = 0
            # One frame: the same function at the same identity (an id is reused once a frame is gone).
            while start < min(len(before), len(stack)) and before[start] == stack[start]:
                start += 1
            way += [("return", rel, name) for rel, name, _ in reversed(before[start - 1:-1])]
        else:
            names = [name for _, name, _ in before]
            if HANDED_FROM.get(sink) in names:
                way += [("return", rel, name) for rel, name, _ in reversed(before[names.index(HANDED_FROM[sink]):-1])]
            if sink in HAND_OVERS:
                way.append(("hand-over", "", HAND_OVERS[sink]))
            start = next((i for i, (_, name, _) in enumerate(stack) if name.startswith(entry)), 0)
        way += [("call", rel, name) for rel, name, _ in stack[start:]]
        before = stack
    return way


def beside(stacks: list[list[Frame]], calls: list[tuple[Frame, str, str]]) -> list[tuple[str, str, str]]:
    """The calls from a frame on the way into another module that are not on it (they look at
    the data, or do other work, and return): (caller, module, callee), each once."""
    on_way = {frame for stack in stacks for frame in stack}
    callees = {(rel, name) for stack in stacks for rel, name, _ in stack}
    out: list[tuple[str, str, str]] = []
    for caller, rel, name in calls:
        if caller in on_way and (rel, name) not in callees and (caller[1], rel, name) not in out:
            out.append((caller[1], rel, name))
    return out


def count(way: list[Step]) -> tuple[int, list[str], list[str]]:
    """(hops, the modules in the order the way enters them, those entered twice)."""
    hops, modules, here = 0, [way[0][1]], way[0][1]
    for i, (kind, rel, _) in enumerate(way):
        if kind == "hand-over":
            rel = next(r for k, r, _ in way[i + 1:] if k != "hand-over")
        if kind == "return":
            here = rel
            continue
        if rel != here:
            hops += 1
            modules.append(rel)
        here = rel
    twice = sorted({m for i, m in enumerate(modules) if m in modules[:i]})
    return hops, modules, twice


def run() -> list[Result]:
    from tests.rundirs import make_run

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = make_run(Path(tmp) / "run", steps=2000, checkpoints=(1000, 2000))
        way, aside = trace_way(run_dir)
    hops, modules, twice = count(way)
    for kind, rel, name in way:
        print(f"  {kind:<9} {name:<44} {rel}", file=sys.stderr)
    print(f"  {hops} hops through {len(set(modules))} modules; entered twice: {', '.join(twice) or 'none'}",
          file=sys.stderr)
    print("  beside the way (calls from a frame on it into another module, returning to it):", file=sys.stderr)
    for caller, rel, name in aside:
        print(f"    {caller:<40} -> {name:<36} {rel}", file=sys.stderr)
    return [Result("data_path", "hops (module to module) from the trainer's append to a plotted column", hops,
                   "hops", target=f"<= {MAX_HOPS}", met=hops <= MAX_HOPS),
            Result("data_path", "calls on that way (every function)", sum(k == "call" for k, _, _ in way), "calls"),
            Result("data_path", "modules entered twice", len(twice), "modules", target="0", met=not twice),
            Result("data_path", "calls beside the way, into other modules", len(aside), "calls")]


if __name__ == "__main__":
    run()
