"""``--serve`` on a big run (200,000 history lines, 100 checkpoints), in a real browser.

- the first full frame in a browser tab: from the page's navigation start to the first
  animation frame after the bytes that carry the first full read (the status pane's
  "200,000 steps") reached the page, the tab's console process started for it, against the
  terminal console's first full frame in the same run (``bench console``'s measure: from
  the spawn of its process to that frame painted); target <= 1.5x;
- the memory of an open tab: the RSS of each tab's console process on the server, with
  three tabs open on the run (target < 150 MB each); the server's own RSS is printed beside.

Debian's chromium driven by Playwright (tests/console/browser.py); where either is
missing, the bench says so in one line and measures nothing of these two.

The server's limits, without a browser (websocket and socket clients):
- 50 tabs opened at once against the default ``--max-tabs``: the tabs' consoles' RSS
  together, against one tab's (target: at most the cap's 8 tabs);
- a normal GET while 500 connections hold half-sent requests, against the same GET on an
  idle server (target: answered, within 10x).

``python -m bench web``.
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


def _tabs_rss(served) -> int:
    total = 0
    for tab in served.tabs():
        try:
            total += tab.memory_info().rss
        except Exception:           # ended meanwhile
            pass
    return total


def _many_tabs(served, count: int) -> tuple[int, int, int]:
    """Open ``count`` tabs at once; (most consoles running at once, their RSS together at
    its peak, tabs refused)."""
    import asyncio

    import aiohttp

    from tests.console import browser

    async def one(session) -> bool:
        try:
            async with session.ws_connect(served.base + "ws?width=100&height=30") as ws:
                drawn = ""
                while "steps" not in drawn:
                    message = await asyncio.wait_for(ws.receive(), browser.START_S)
                    if message.type != aiohttp.WSMsgType.BINARY:
                        return True
                    drawn += message.data.decode(errors="replace")
                await asyncio.sleep(3.0)        # past start-up, every tab open at once
                return True
        except aiohttp.WSServerHandshakeError:
            return False

    async def all_of_them() -> tuple[int, int, int]:
        async with aiohttp.ClientSession() as session:
            tasks = [asyncio.create_task(one(session)) for _ in range(count)]
            peak_tabs = peak_rss = 0
            while not all(task.done() for task in tasks):
                peak_tabs, peak_rss = max(peak_tabs, len(served.tabs())), max(peak_rss, _tabs_rss(served))
                await asyncio.sleep(0.25)
            opened = sum(task.result() for task in tasks)
            return peak_tabs, peak_rss, count - opened

    result = asyncio.run(all_of_them())
    browser.wait_until(lambda: not served.tabs(), what="the tabs' consoles to end", detail=served.output)
    return result


def _get_seconds(url: str) -> float:
    import urllib.request

    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read()
    return time.perf_counter() - started


def _limits(run_dir: Path, log_dir: Path) -> list[Result]:
    import socket

    from bench.common import Result
    from tests.console import browser

    results: list[Result] = []
    with browser.Served(run_dir, log_dir=log_dir) as served:
        _, one_rss, _ = _many_tabs(served, 1)
        tabs, rss, refused = _many_tabs(served, 50)
        results.append(Result("web", f"50 tabs at once, default --max-tabs: {tabs} consoles ran, {refused} refused; "
                              "their RSS together", rss / 2**20, "MiB", one_rss / 2**20, "one tab's console",
                              target="<= 8x (the cap)", met=tabs <= 8 and rss / max(one_rss, 1) <= 8.5))
        idle = statistics.median(_get_seconds(served.base) for _ in range(5))
        host, port = served.base.split("://", 1)[1].rstrip("/").split(":")
        held = []
        try:
            for _ in range(500):
                sock = socket.create_connection((host, int(port)), timeout=60)
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                held.append(sock)
            loaded = statistics.median(_get_seconds(served.base) for _ in range(5))
        finally:
            for sock in held:
                sock.close()
        results.append(Result("web", "a GET while 500 half-sent requests are held open", loaded * 1000, "ms",
                              idle * 1000, "the same GET, nothing else open", target="answered, <= 10x",
                              met=loaded / idle <= 10))
    return results


def run() -> list[Result]:
    import tempfile

    from bench.bench_console import compile_sources, make_big_run
    from bench.common import Result
    from tests.console import browser
    from tests.rundirs import make_run

    with tempfile.TemporaryDirectory() as tmp:
        results = _limits(make_run(Path(tmp) / "run", steps=1000), Path(tmp))
    why = browser.missing()
    if why:
        print(f"bench web: the browser's part skipped, nothing measured: {why}", file=sys.stderr, flush=True)
        return results
    from playwright.sync_api import sync_playwright

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
