"""What a person watching sees: a live status line on a TTY, plain lines otherwise, and
``trainer.log`` always.

Nothing here touches the training state; tokens/s is wall-clock and is never written to
``.loss.json`` (whose step lines must be identical across a resume).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

from rundir.layout import TRAINER_LOG
from rundir.safe_read import open_for_append

LIVE_REFRESH_S = 0.25


def _same_file(stream: TextIO, path: Path) -> bool:
    """True when ``stream`` already writes to ``path`` (a launcher redirected us into trainer.log)."""
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Progress:
    """Status display and log. ``log_every`` steps between plain/log lines."""

    def __init__(self, run_dir: str | os.PathLike[str], log_every: int, stream: TextIO | None = None):
        self.path = Path(run_dir) / TRAINER_LOG
        self.log_every = log_every
        # Never blocks, and refuses what is not a regular file (a FIFO there would hang the open).
        self._log = os.fdopen(open_for_append(self.path), "a", encoding="utf-8", buffering=1)
        self.stream = stream if stream is not None else sys.stdout
        # When stdout is trainer.log itself, write each line once.
        self._echo = not _same_file(self.stream, self.path)
        self._live = None
        if self._echo and self.stream.isatty():
            from rich.console import Console
            from rich.live import Live
            self._live = Live(console=Console(file=self.stream), auto_refresh=False, transient=True)
            self._live.start()
        self._last_refresh = 0.0
        self._log_failed = False
        self._rate_mark: tuple[float, int] | None = None
        self.tokens_per_s = 0.0

    def _write_log(self, line: str) -> None:
        # A full disk must not turn a notice into a crash: the line still reaches the screen.
        try:
            self._log.write(line)
        except OSError as err:
            if not self._log_failed:
                self._log_failed = True
                print(f"{_stamp()} cannot write {self.path}: {err.strerror}", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        """An event or notice: to the log and the screen."""
        line = f"{_stamp()} {text}"
        self._write_log(line + "\n")
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        elif self._echo:
            print(line, file=self.stream, flush=True)

    def step(self, step: int, loss: float, ema_loss: float | None, arm: str, tokens: int) -> None:
        """After each update; cheap unless a line or a repaint is due."""
        now = time.perf_counter()
        if self._rate_mark is None:
            self._rate_mark = (now, tokens)
        live_due = self._live is not None and now - self._last_refresh >= LIVE_REFRESH_S
        if step % self.log_every == 0 or live_due:
            then, then_tokens = self._rate_mark
            if now - then >= LIVE_REFRESH_S and tokens > then_tokens:
                self.tokens_per_s = (tokens - then_tokens) / (now - then)
                self._rate_mark = (now, tokens)
        if step % self.log_every == 0:
            ema = f"{ema_loss:.4f}" if ema_loss is not None else "-"
            line = f"step {step} loss {loss:.4f} ema {ema} tok/s {self.tokens_per_s:,.0f} arm {arm}"
            self._write_log(f"{_stamp()} {line}\n")
            if self._live is None and self._echo:
                print(line, file=self.stream, flush=True)
        if live_due:
            self._last_refresh = now
            self._live.update(self._status(step, loss, ema_loss, arm), refresh=True)

    def _status(self, step: int, loss: float, ema_loss: float | None, arm: str):
        from rich.text import Text
        text = Text()
        for label, value in (("step", f"{step:,}"), ("loss", f"{loss:.4f}"),
                             ("ema", f"{ema_loss:.4f}" if ema_loss is not None else "-"),
                             ("tok/s", f"{self.tokens_per_s:,.0f}"), ("arm", arm)):
            text.append(f"{label} ", style="dim")
            text.append(f"{value}   ", style="bold")
        return text

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        try:
            self._log.close()
        except OSError:
            pass
