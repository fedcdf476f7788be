"""A real browser on a real ``andrea-console --serve``: Debian's chromium driven by
Playwright's Python package (its own browser builds are never downloaded).

Shared by the browser tests, ``make screenshots`` and ``python -m bench web``. The
terminal in the page draws on a canvas, so what it shows is read where it arrives: an
init script keeps every byte the page's websocket receives (Textual's output, escape
sequences and text), and :func:`screen_text` is that stream without the escapes.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# Headless, and nothing of its own over the network: this machine's network is closed, and
# chromium's background connections would only be refused.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
START_S = 60.0          # generous: a loaded 2-CPU machine

# Every byte the page's websocket receives, decoded, in window.__screen, and the same
# without escape sequences in window.__text; and the performance.now() of the first
# animation frame after each text of window.__watch arrived (window.__seen[text]), for the
# first-frame bench.
SCREEN_HOOK = r"""
window.__screen = "";
window.__text = "";
window.__watch = [];
window.__seen = {};
const ESCAPES = /\x1b(\[[0-9;?<>=$]*[ -\/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])/g;
window.WebSocket = class extends window.WebSocket {
  constructor(...args) {
    super(...args);
    const decoder = new TextDecoder();
    this.addEventListener("message", (event) => {
      if (typeof event.data === "string") return;
      const data = decoder.decode(event.data, {stream: true});
      window.__screen += data;
      window.__text += data.replace(ESCAPES, "");
      for (const text of window.__watch) {
        if (!(text in window.__seen) && window.__text.includes(text)) {
          window.__seen[text] = null;
          requestAnimationFrame(() => { window.__seen[text] = performance.now(); });
        }
      }
    });
  }
};
"""


def missing() -> str | None:
    """What a browser test needs and this machine lacks, in one line (None: nothing)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"Debian's chromium is not installed ({CHROMIUM}; apt-get install chromium, as .ci/run does as root)"
    return None


def launch(playwright):
    """Chromium, headless (Playwright gives every launch a fresh profile of its own)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def open_page(browser, url: str, size: tuple[int, int] = (1600, 1000)):
    """A page of its own (a context: no cookie carried over) with the screen hook, at ``url``;
    returns (page, the HTTP status of the page)."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.add_init_script(SCREEN_HOOK)
    response = page.goto(url)
    return page, response.status if response is not None else None


def screen_text(page) -> str:
    """Everything the page's terminal was sent, without the escape sequences."""
    return page.evaluate("window.__text")


def wait_for_text(page, *texts: str, timeout: float = START_S, detail=lambda: "") -> None:
    """Until every one of ``texts`` has arrived on the page's screen; ``detail()`` says more
    in the failure."""
    try:
        page.wait_for_function("texts => texts.every(t => window.__text.includes(t))", arg=list(texts),
                               timeout=timeout * 1000)
    except Exception as err:
        raise AssertionError(f"the page never showed {texts!r} within {timeout} s; it showed:\n"
                             f"{screen_text(page)[-3000:]}\n{detail()}") from err


def press(page, *keys: str) -> None:
    """Keys typed into the page's terminal (focused first, as a click would)."""
    page.focus(".xterm-helper-textarea")
    for key in keys:
        page.keyboard.press(key)


class Served:
    """``andrea-console TARGET --serve --port 0 [ARGS]`` in a session of its own; ``url`` is
    the line it prints. ``interrupt()`` is Ctrl-C at its terminal."""

    def __init__(self, target: Path, *args: str, log_dir: Path | None = None, open_files: int | None = None):
        """``open_files``: the server's descriptor limit (RLIMIT_NOFILE), where a test needs it low."""
        log_dir = log_dir or target.parent
        self.log_path = log_dir / f"serve-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "console", str(target), "--serve", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     preexec_fn=None if open_files is None else lambda: resource.setrlimit(
                                         resource.RLIMIT_NOFILE, (open_files, open_files)))
        self.url = self._first_line()

    def _first_line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], START_S)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("http://"):
            self.close()
            raise AssertionError(f"--serve printed no URL within {START_S} s: {line!r}\n{self.output()}")
        return line

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0]

    def tabs(self) -> list[psutil.Process]:
        """The consoles of the open tabs (the server's children)."""
        try:
            return psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def interrupt(self, timeout: float = START_S) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(START_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(predicate, timeout: float = START_S, what: str = "condition", detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{detail()}")
