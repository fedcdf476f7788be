"""``--serve`` on a big run (200,000 history lines, 100 checkpoints), in a real browser.

- the first full frame in a browser tab: from the page's navigation start to the first
  animation frame after the bytes that carry the first full read (the status pane's
  "200,000 steps") reached the page, the tab's console process started for it, against the
  terminal console's first full frame in the same run (``bench console``'s measure: from
  the spawn of its process to that frame painted); target <= 1.5x;
- the memory of an open tab: the RSS of each tab's console process on the server, with
  three tabs open on the run (target < 150 MB each); the server's own RSS is printed beside.

Debian's chromium driven by Playwright (tests/console/browser.py); where either is
missing, the bench says so in one line and measures nothing. ``python -m bench web``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.common import Result

ROOT = Path(__file__).resolve().parents[1]
MARKER = "200,000 steps"        # in the first full frame (status pane, and the first event)
VIEWPORT = (1360, 860)          # about the 140x45 cells of bench console's terminal
TABS = 3
REPEAT = 5


def _terminal_frame(run_dir: Path) -> float:
    """Seconds from spawn to the terminal console's first full frame (bench console's)."""
    spawned = time.time()
    out = subprocess.run([sys.executable, "-m", "bench.bench_console", "--first-frame", str(run_dir)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, stdout=subprocess.PIPE, text=True)
    return float(out.stdout.split()[-1]) - spawned


def _open(chromium, url: str):
    from tests.console import browser

    context = chromium.new_context(viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]})
    page = context.new_page()
    page.add_init_script(browser.SCREEN_HOOK)
    page.add_init_script(f"window.__watch = [{MARKER!r}];")
    page.goto(url)
    page.wait_for_function(f"window.__seen[{MARKER!r}] > 0", timeout=browser.START_S * 1000)
    return page


def _web_frame(chromium, served) -> float:
    """Seconds from a new tab's navigation start to its first full frame; the tab is closed
    and its console ended before this returns."""
    from tests.console import browser

    page = _open(chromium, served.url)
    seconds = page.evaluate(f"window.__seen[{MARKER!r}]") / 1000.0
    page.context.close()
    browser.wait_until(lambda: not served.tabs(), what="the tab's console to end", detail=served.output)
    return seconds


def _tab_memory(chromium, served) -> tuple[list[int], int]:
    """RSS of each tab's console with TABS tabs open, and the server's."""
    import psutil

    from tests.console import browser

    pages = [_open(chromium, served.url) for _ in range(TABS)]
    time.sleep(3.0)                 # past start-up: the garbage collector is back on, the ticks run
    rss = [tab.memory_info().rss for tab in served.tabs()]
    server = psutil.Process(served.proc.pid).memory_info().rss
    for page in pages:
        page.context.close()
    browser.wait_until(lambda: not served.tabs(), what="the tabs' consoles to end", detail=served.output)
    return rss, server


def run() -> list[Result]:
    import tempfile

    from bench.bench_console import compile_sources, make_big_run
    from bench.common import Result
    from tests.console import browser

    why = browser.missing()
    if why:
        print(f"bench web: skipped, nothing measured: {why}", file=sys.stderr, flush=True)
        return []
    from playwright.sync_api import sync_playwright

    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        run_dir = make_big_run(Path(tmp))
        compile_sources()
        chromium = browser.launch(playwright)
        with browser.Served(run_dir, log_dir=Path(tmp)) as served:
            _terminal_frame(run_dir)                # warm the page cache, and the browser's
            _web_frame(chromium, served)
            web, terminal, ratios = [], [], []
            for _ in range(REPEAT):                 # alternated: a noisy machine's drift cancels
                terminal.append(_terminal_frame(run_dir))
                web.append(_web_frame(chromium, served))
                ratios.append(web[-1] / terminal[-1])
            ratio = statistics.median(ratios)
            results.append(Result("web", "first full frame in a browser tab (from navigation start)",
                                  statistics.median(web), "s", statistics.median(terminal),
                                  "terminal console (from spawn)", ratio, "<= 1.5x", ratio <= 1.5))
            rss, server = _tab_memory(chromium, served)
        chromium.close()
    worst = max(rss)
    results.append(Result("web", f"RSS of a tab's console, {TABS} tabs open (largest)", worst / 2**20, "MiB",
                          target="< 150 MB", met=worst < 150e6))
    results.append(Result("web", "RSS of the --serve process", server / 2**20, "MiB"))
    return results


if __name__ == "__main__":
    from bench.common import print_table

    print_table(run())
