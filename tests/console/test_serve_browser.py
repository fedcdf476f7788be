"""``--serve`` in a real browser: Debian's chromium driven by Playwright (tests/console/browser.py).

The page shows the run and takes keys with no click first; a read-only tab refuses ``c`` in
its own console; with the token, ``c`` lands a checkpoint on a live micro trainer; without it, 403;
closing a tab ends its console, and Ctrl-C at the server ends the open ones. The tests share one chromium on one
xdist worker (group ``browser``), in a module of their own: Playwright's synchronous API
runs an event loop that the asyncio tests must not find running. About 40 s together on a
loaded 2-CPU machine (a micro trainer's start included).
"""

from __future__ import annotations

import re

import pytest

from console.tui.app import READ_ONLY_REFUSAL
from rundir import list_checkpoints
from tests.console import browser
from tests.console.trainer_proc import Trainer
from tests.processes import processes_naming
from tests.rundirs import make_run

REFUSED = READ_ONLY_REFUSAL.format(key="")[2:]
STEP = re.compile(r"step +([\d,]+)")


@pytest.fixture(scope="module")
def chromium():
    why = browser.missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = browser.launch(playwright)
        yield instance
        instance.close()


@pytest.mark.xdist_group("browser")
def test_browser_read_only_shows_the_run_refuses_c_and_ctrl_c_ends_the_tab(chromium, tmp_path):
    runs = tmp_path / "runs"
    make_run(runs / "alpha-run", steps=4321)
    with browser.Served(runs) as served:
        page, status = browser.open_page(chromium, served.url)
        assert status == 200
        browser.wait_for_text(page, "alpha-run", "4,321")          # the overview's row
        browser.press(page, "Enter")                                # the run's dashboard
        browser.wait_for_text(page, "history    4,321 steps")
        assert len(served.tabs()) == 1
        browser.press(page, "c")
        browser.wait_for_text(page, f"c: {REFUSED}")
        tab = served.tabs()[0]
        assert "--read-only" in tab.cmdline()
        page.screenshot(path=str(tmp_path / "dashboard-web.png"))
        assert (tmp_path / "dashboard-web.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # Ctrl-C at the server's terminal with the tab open: the tab's console ends too.
        assert served.interrupt() == 0, served.output()
        assert not tab.is_running()
        page.wait_for_selector("body.-closed", timeout=browser.START_S * 1000)
        page.context.close()
    assert not processes_naming(tmp_path)


def checkpoint_story(page, run, served) -> str:
    """What the page, trainer.log and the disk said of checkpoints (a failure's detail)."""
    said = [line for line in browser.screen_text(page).splitlines() if "checkpoint" in line or "SIGUSR1" in line]
    logged = [line for line in (run / "trainer.log").read_text(errors="replace").splitlines() if "checkpoint" in line]
    return "\n".join(["the page's lines on checkpoints:", *said[-20:], "trainer.log on checkpoints:", *logged[-20:],
                      f"on disk: {[(c.path.name, c.status) for c in list_checkpoints(run)]}",
                      "the server's output:", served.output()[-2000:]])


@pytest.mark.xdist_group("browser")
def test_browser_with_the_token_c_lands_a_checkpoint_and_closing_the_tab_ends_its_console(chromium, tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer, browser.Served(run, "--allow-control") as served:
        page, status = browser.open_page(chromium, served.base)
        assert status == 403 and not served.tabs()                  # no token: nothing starts
        page.context.close()
        page, status = browser.open_page(chromium, served.url)
        assert status == 200
        browser.wait_for_text(page, "live", "running")
        assert STEP.search(browser.screen_text(page))
        assert not list_checkpoints(run)
        browser.press(page, "c")
        browser.wait_for_text(page, "requested checkpoint landed", detail=lambda: checkpoint_story(page, run, served))
        assert [c for c in list_checkpoints(run) if c.status == "complete"]
        assert REFUSED not in browser.screen_text(page)
        tab = served.tabs()[0]
        assert "--read-only" not in tab.cmdline()
        page.context.close()                                        # the tab closes: its console ends
        browser.wait_until(lambda: not served.tabs(), what="the tab's console to end", detail=served.output)
        assert trainer.proc.poll() is None                          # and training goes on
        assert served.interrupt() == 0
    assert "tab closed" in served.output()


@pytest.mark.xdist_group("browser")
def test_browser_keys_work_without_a_click_first(chromium, tmp_path):
    """The page focuses its terminal itself: ? opens the help with no click on the page."""
    run = make_run(tmp_path / "runs" / "focus-run", steps=1234)
    with browser.Served(run) as served:
        page, status = browser.open_page(chromium, served.url)
        assert status == 200
        browser.wait_for_text(page, "history    1,234 steps")
        focused = page.evaluate("document.activeElement && document.activeElement.className")
        assert "xterm-helper-textarea" in focused, focused
        page.keyboard.press("?")                            # no click, no focus() by the test
        browser.wait_for_text(page, "andrea-console help")
        page.context.close()
