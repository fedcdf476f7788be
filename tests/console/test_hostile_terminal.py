"""Names from a run directory never reach the terminal as raw control bytes, nor as markup.

Every kind of name a history or a ``run.toml`` can give a screen (an arm's, which makes
``share/ARM`` and ``p/ARM``; an eval event's ``per_arm`` names, which make ``eval_loss/ARM``;
any numeric key of the step lines; the series ``run.toml``'s ``[console] plots`` asks for;
a start event's keys, which are the comparison's config diff) carries, across its
instances, every C0 control, DEL, every C1 control, the bidi controls and the line and
paragraph separators, a CSI (``ESC [ 2 J``, and C1's ``CSI``), an OSC 52 clipboard write, an
OSC 8 hyperlink, and Rich markup (``[link=...]``, ``[bold]``, a stray ``[/]``).

The real console runs in a pseudo-terminal this test owns, and every byte it writes is
kept. One session visits every screen: the overview, a run's dashboard, its plot's cursor
read-out, the series picker (and a series picked), the grid of small plots and its picker,
the help, an arm's detail, the checkpoint inspector, then the comparison of two runs with its
config diff and its own picker.

Textual writes escape sequences of its own, so a raw control cannot be told from them by
itself. Each planted control is therefore followed by the marker ``Zq``, which Textual never
writes: the control from a name reached the terminal raw exactly when the output holds the
control immediately followed by ``Zq`` (the multi-byte sequences: the whole sequence then
``Zq``; the OSC 52 by its unique payload). Markup was parsed exactly when Textual wrote an
OSC 8 hyperlink to the planted URL (the literal ``[link=...]`` must be on screen instead).
That the names were shown at all, escaped, is checked per screen too: a test that saw
nothing would prove nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import orjson

from rundir import LossHistoryWriter, RunConfig, write_run_config
from rundir.config import ConsoleSection
from rundir.layout import LOSS_JSON
from rundir.text import is_unsafe, printable
from tests.rundirs import EPOCH, make_run

COLUMNS, ROWS = 240, 60             # the full layout (the grid needs it), the read-out reaching the arms
MARK = "Zq"
CONTROLS = ([chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
            + ["\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)),
               "\u2028", "\u2029"])
CLIPBOARD = "SE9TVElMRS1DTElQ"          # base64, never written by anyone else
SEQUENCES = ("\x1b[2J", f"\x1b]52;c;{CLIPBOARD}\x07", "\x1b]8;;https://osc.example\x1b\\", "\x9b2J")
LINK = "https://markup.example"
MARKUP = (f"[link={LINK}]", "[bold]", "[/]")
# The sequences first (the start of a name is what every view shows), the markup last: the
# last name of each kind, which the screens below pick, carries it.
PIECES = [p + MARK for p in (*SEQUENCES, *CONTROLS, *MARKUP)]
START_S = 60.0                          # the ceiling of one wait (each ends with its event)


# What a numeric key can carry and still be a series: the reader drops a key with a C0
# control, a quote or a backslash (rundir/history/keys.py), so these keep the rest (C1's CSI,
# the bidi controls, DEL, markup).
KEY_PIECES = [p for p in PIECES if not re.search(r'[\x00-\x1f"\\]', p)]


def names(tag: str, n: int, pieces: list[str] = PIECES) -> list[str]:
    """``n`` names that carry every piece between them, each starting with its own tag."""
    per = -(-len(pieces) // n)
    return [f"{tag}{i}" + "".join(pieces[i * per:(i + 1) * per]) for i in range(n)]


ARMS, EVAL_ARMS, PLOTS, START_KEYS = names("A", 6), names("E", 4), names("P", 4), names("S", 4)
KEYS = names("K", 4, KEY_PIECES)


def hostile_runs(root: Path) -> Path:
    """Two runs whose every shown name is hostile (two: the comparison needs them)."""
    for j, name in enumerate(("one", "two")):
        run = make_run(root / name, steps=300, checkpoints=(100, 200, 300), arms=tuple(ARMS))
        config = RunConfig.from_preset("micro")
        config.run.name = name
        config.console = ConsoleSection(plots=list(PLOTS))          # none of them in the history
        write_run_config(run, config)
        lines = (run / LOSS_JSON).read_bytes().splitlines(keepends=True)
        start = orjson.loads(lines[0])
        assert start["event"] == "start"
        start.update({key: j for key in START_KEYS})             # different: each is a row of the diff
        start["note"] = "".join(PIECES[-len(MARKUP):]) + str(j)     # a value that looks like markup
        lines[0] = orjson.dumps(start) + b"\n"
        (run / LOSS_JSON).write_bytes(b"".join(lines))
        with LossHistoryWriter(run / LOSS_JSON) as writer:
            for step in range(301, 306):
                writer.append({"step": step, "loss": 2.0, "lr": 3e-3, "grad_norm": 1.0, "arm": ARMS[0],
                               "tokens": step * 512, "time": EPOCH + step, **{key: float(step) for key in KEYS}})
            writer.append({"event": "eval", "step": 305, "eval_loss": 2.1, "per_arm": dict.fromkeys(EVAL_ARMS, 2.2),
                           "windows": 8, "time": EPOCH + 305})
    return root


class Terminal:
    """A pseudo-terminal of ``COLUMNS`` x ``ROWS`` running ``argv``; every byte it writes is kept."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     start_new_session=True)
        os.close(slave)
        self._out = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:             # EIO: the console exited and the slave side closed
                return
            if not data:
                return
            with self._lock:
                self._out += data

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._out)

    def text(self, since: int = 0, until: int | None = None) -> str:
        """What was written from byte ``since`` to ``until`` (bytes that are not UTF-8 kept as escapes)."""
        with self._lock:
            return bytes(self._out[since:until]).decode("utf-8", "surrogateescape")

    def press(self, keys: str, until: str | tuple[str, ...]) -> None:
        """Send ``keys``; wait until the output written since holds ``until`` (each of them, if several)."""
        start = self.size
        os.write(self.master, keys.encode())
        deadline = time.monotonic() + START_S
        wanted = (until,) if isinstance(until, str) else until
        while missing := [text for text in wanted if text not in self.text(start)]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {missing[0]!r} after {keys!r} (exit {self.proc.poll()}); the screen's last "
                                     f"bytes: {self.text(max(0, self.size - 3000))!r}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)
        self._reader.join(timeout=10)


ESC, ENTER, END, RIGHT, UP, DOWN = "\x1b", "\r", "\x1b[F", "\x1b[C", "\x1b[A", "\x1b[B"
# Each screen in turn (their keys: console/tui/keys.py): the keys that open it, then a text of it
# that holds no name (the wait ends there, and at the names EXPECTED gives the screen; several:
# all of them); None: a step back, not a screen of its own. A dialog is closed by a key of its
# own, not Escape: a key that follows an Escape too closely reads as Alt+key. Escape leaves only
# full screens, and the wait is then for the screen behind.
VISITS = (
    ("overview", "", "runs, the most"),
    # An arm's row (the history was read) and the plot's legend ("raw smoothed"): the plot drew
    # the history, so it has the columns a cursor moves over (a cursor key before that moves
    # nothing). The arms pane can be drawn a frame before the plot: under load that is long.
    ("dashboard", ENTER, ("A0\\x1b[2J", "smoothed")),
    ("cursor read-out", RIGHT, "156,160 tok"),          # the tokens at the cursor's step
    # The readout holds the series that fit; the table of every series (t) holds them all.
    ("series table", "t", "every series"),
    (None, "t", "156,160 tok"),                       # t again closes it (a bare ESC then m reads as Alt+m)
    ("picker", "m", "Esc close"),
    # The picker's order ends with the numeric keys, then the eval arms (sorted): K3.
    ("series picked", END + UP * len(EVAL_ARMS) + ENTER, "K3"),
    ("grid", "g", "no P0"),
    ("grid picker", "m", "Esc close"),
    (None, "m", "bandit arms"),
    ("help", "?", "andrea-console help"),
    (None, "?", "bandit arms"),
    (None, "3", "pulls   share"),                  # the arms pane focused: drawn again
    # The last arm of .state.json's (run.toml's own arms follow): the first ↓ selects row 0.
    ("arm detail", DOWN * len(ARMS) + ENTER, "Enter / q close"),
    (None, ENTER, "bandit arms"),
    ("inspector", "i", "tensors:"),
    (None, ESC, "bandit arms"),
    (None, ESC, "runs, the most"),
    (None, " ", "●"),                                   # both runs marked
    (None, DOWN + " ", "●"),
    ("compare", "v", "start.S"),                        # the config diff's rows
    ("compare picker", "m", "Esc close"),
    ("compared series", END + ENTER, "eval loss · E3"),
)


def visit_every_screen(term: Terminal) -> dict[str, str]:
    """What was written while each screen was in front (from its keys to the next screen's).
    Each wait also ends only once the screen has shown the names it is expected to show: a
    frame can hold a screen's title before its rows (the series table's, at a load of 9, was
    closed between the two)."""
    starts: list[tuple[str | None, int]] = []
    for screen, keys, until in VISITS:
        starts.append((screen, term.size))
        wanted = (until,) if isinstance(until, str) else until
        term.press(keys, (*wanted, *EXPECTED.get(screen, ())))     # EXPECTED: below, per screen
    ends = [at for _, at in starts[1:]] + [term.size]
    return {screen: term.text(at, end) for (screen, at), end in zip(starts, ends) if screen is not None}


def raw_pieces(text: str) -> list[str]:
    """The planted pieces that ``text`` holds raw (see the module's docstring)."""
    found = [repr(p) for p in PIECES if p in text and not p.startswith("[")]
    found += [f"{text[m.start() - 1]!r} before {MARK}" for m in re.finditer(MARK, text)
              if m.start() and is_unsafe(text[m.start() - 1])]
    if re.search(f"[\x1b\x9d]\\]?52;c;{CLIPBOARD}", text):
        found.append("the OSC 52 clipboard write")
    if re.search(r"\x1b\]8;[^\x07\x1b]*" + re.escape(LINK), text):
        found.append(f"a hyperlink to {LINK} (markup parsed)")
    return found


# What each screen shows of a name (the start of it: the views cut and wrap long names).
def shown(name: str, prefix: str = "") -> str:
    return prefix + printable(name)[:12]


EXPECTED = {
    "overview": [shown(ARMS[0])],                                    # the zombie arms' problem
    "dashboard": [shown(ARMS[0])],
    "cursor read-out": [],
    "series table": [shown(ARMS[0], "share/")],
    "picker": [shown(ARMS[0], "share/")],
    "series picked": [shown(KEYS[-1])],                              # the plot's new title
    "grid": [shown(PLOTS[0], "no ")],
    "grid picker": [shown(ARMS[0], "share/")],
    "help": [],
    "arm detail": [shown(ARMS[-1], "arm ")],
    "inspector": [],
    "compare": [shown(START_KEYS[0], "start."), "".join(PIECES[-len(MARKUP):])],
    "compare picker": [shown(ARMS[0], "share/")],
    "compared series": [shown(EVAL_ARMS[-1], "eval loss · ")],
}


def test_no_name_reaches_the_terminal_raw_on_any_screen(tmp_path):
    root = hostile_runs(tmp_path / "runs")
    term = Terminal([sys.executable, "-m", "console", str(root)], cwd=Path(__file__).resolve().parents[2])
    try:
        seen = visit_every_screen(term)
        whole = term.text()
    finally:
        term.close()
    assert set(seen) == set(EXPECTED)
    leaks = {screen: raw_pieces(text) for screen, text in seen.items()}
    assert not any(leaks.values()), {screen: found for screen, found in leaks.items() if found}
    assert raw_pieces(whole) == []
    missing = {screen: [e for e in EXPECTED[screen] if e not in text] for screen, text in seen.items()}
    assert not any(missing.values()), {screen: m for screen, m in missing.items() if m}
    # Every piece is on screen somewhere, escaped (a tab: as spaces); the markup as it is written.
    assert [p for p in PIECES if printable(p) not in whole and not p.startswith("\t")] == []
