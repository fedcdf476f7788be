"""``--serve`` and ``--read-only`` without a browser: the console's own refusal, the
command line, the token and the origin over plain HTTP, a tab opened by a websocket
client. The browser tests are in test_serve_browser.py."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest

from console.tui.app import READ_ONLY_REFUSAL, ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import DashboardScreen
from console.tui.widgets import EventLog
from tests.console import browser
from tests.console.conftest import until
from tests.console.trainer_proc import ROOT
from tests.processes import processes_naming
from tests.rundirs import make_run

REFUSED = READ_ONLY_REFUSAL.format(key="")[2:]         # "refused: this console is read-only, ..."


def console(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# -- the console's own refusal (no browser) ------------------------------------------

@pytest.mark.asyncio
async def test_a_read_only_dashboard_refuses_c_s_p_r_with_one_line_each(tmp_path):
    app = ConsoleApp(make_run(tmp_path / "run", steps=300), ConsoleOptions(watch=False, tick=None, read_only=True))
    async with app.run_test(size=(140, 45)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first read")
        for key in "cspr":
            await pilot.press(key)
        await pilot.pause()
        lines = [line for line in app.dashboard.query_one(EventLog).texts if REFUSED in line]
        assert [re.search(r"(\w): refused", line)[1] for line in lines] == list("cspr"), lines
        assert isinstance(app.screen, DashboardScreen)          # no confirmation, no pivot or rollback screen
        assert not [w for w in app.workers if w.group in ("signal", "pivot-screen", "rollback-screen")]
        await pilot.press("l")                                  # what only changes the view still works
        assert app.dashboard.plot.log_y


@pytest.mark.asyncio
async def test_a_read_only_overview_refuses_c_and_s_on_the_selected_run(tmp_path):
    make_run(tmp_path / "runs" / "one", steps=50)
    app = ConsoleApp(tmp_path / "runs", ConsoleOptions(watch=False, tick=None, read_only=True))
    async with app.run_test(size=(140, 45)) as pilot:
        await until(pilot, lambda: app.summaries, what="the runs scanned")
        await pilot.press("c")
        await pilot.pause()
        assert REFUSED in str(app.overview.query_one("#overview-notice").render())
        await pilot.press("s")
        await pilot.pause()
        assert app.screen is app.overview


@pytest.mark.parametrize("args, says", [
    (["--host", "0.0.0.0"], "--host, --port, --allow-control and --max-tabs go with --serve"),
    (["--max-tabs", "2"], "--host, --port, --allow-control and --max-tabs go with --serve"),
    (["--serve", "--max-tabs", "0"], "--max-tabs 0: expected 1 to 256"),
    (["--serve", "--start"], "--start: refused: this console is read-only"),
    (["--read-only", "--stop"], "--stop: refused: this console is read-only"),
    (["--read-only", "--serve", "--allow-control"], "contradict"),
    (["--serve", "--notify", "true"], "--notify does not go with --serve"),
    (["--serve", "--port", "70000"], "--port 70000: expected 0 to 65535"),
])
def test_serve_usage_errors_exit_2_with_one_line(tmp_path, args, says):
    out = console(str(make_run(tmp_path / "run", steps=10)), *args)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_serve_without_textual_serve_says_how_to_install_it(tmp_path):
    blocked = ("import sys; sys.modules['textual_serve'] = None; "
               "from console.cli import main; sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", blocked, str(make_run(tmp_path / "run", steps=10)), "--serve"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "pip install 'andrea-console[serve]'" in out.stderr and not out.stdout, out


def test_control_off_localhost_is_not_served_unconfirmed(tmp_path):
    out = console(str(make_run(tmp_path / "run", steps=10)), "--serve", "--host", "0.0.0.0", "--port", "0",
                  "--allow-control")
    assert out.returncode == 1 and "not confirmed" in out.stderr and not out.stdout, out



def test_serve_with_control_and_start_starts_the_trainer_first(tmp_path):
    """``--serve --allow-control --start``: the trainer is started, then the server (here off
    localhost, not confirmed: exit 1), and the console says the trainer keeps training
    (this path once raised a TypeError before starting anything)."""
    run = tmp_path / "run"
    out = console(str(run), "--serve", "--allow-control", "--start", "--preset", "micro", "--host", "0.0.0.0",
                  "--port", "0")
    started = re.search(r"the trainer \(pid (\d+)\) keeps training", out.stderr)
    try:
        assert out.returncode == 1 and "not confirmed" in out.stderr and started, out
        assert f"`andrea-console {run} --stop` stops it" in out.stderr
    finally:
        if started:
            trainer = psutil.Process(int(started[1]))
            trainer.terminate()
            trainer.wait(120)

# -- the token, over plain HTTP ------------------------------------------------------

def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_without_the_token_403_and_no_console_starts(tmp_path):
    run = make_run(tmp_path / "run", steps=10)
    with browser.Served(run, "--allow-control") as served:
        token = served.url.split("token=", 1)[1]
        assert len(token) >= 40
        assert status_of(served.base) == 403
        assert status_of(served.base + "?token=" + token[:-1] + "x") == 403
        # The tab's websocket itself: refused before any console process starts.
        ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        assert status_of(served.base + "ws?width=80&height=24", ws) == 403
        assert status_of(served.base + "ws?width=80&height=24", {**ws, "Cookie": "andrea-console-token-1=x"}) == 403
        assert not served.tabs()
        assert status_of(served.url) == 200
        # A name that rebinds to this machine is not localhost.
        assert status_of(served.url, {"Host": "attacker.example"}) == 403
        assert served.interrupt() == 0
    assert "refused GET /ws" in served.output()


def test_read_only_still_refuses_another_sites_websocket(tmp_path):
    with browser.Served(make_run(tmp_path / "run", steps=10)) as served:
        ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "https://elsewhere.example"}
        assert status_of(served.base + "ws?width=80&height=24", ws) == 403
        # An origin is scheme, host and port: this server's host and port over https are
        # another origin (issue 35: the scheme was not compared); so is an opaque one.
        host = served.base.split("://", 1)[1].rstrip("/")
        for origin in (f"https://{host}", f"ws://{host}", "null"):
            assert status_of(served.base + "ws?width=80&height=24", {**ws, "Origin": origin}) == 403, origin
        assert status_of(served.base) == 200 and not served.tabs()


def test_a_tab_whose_console_cannot_start_is_closed(tmp_path):
    """The run directory is gone when a tab opens: its console exits 2 with one line, and
    the websocket is closed (the page says the session ended), not left open and blank."""
    import shutil

    import aiohttp

    run = make_run(tmp_path / "run", steps=10)
    with browser.Served(run) as served:
        shutil.rmtree(run)

        async def open_tab() -> aiohttp.WSMessage:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(served.base + "ws?width=100&height=30") as ws:
                    while True:
                        message = await asyncio.wait_for(ws.receive(), browser.START_S)
                        if message.type != aiohttp.WSMsgType.BINARY:
                            return message

        assert asyncio.run(open_tab()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        browser.wait_until(lambda: not served.tabs(), what="the tab to be forgotten")
        assert served.interrupt() == 0
        # (textual-serve passes a tab's stderr on to the server's stdout)
        assert "no such run directory" in served.proc.stdout.read().decode(), served.output()


def test_a_server_killed_with_sigkill_leaves_no_tab_console(tmp_path):
    """A tab opened by a websocket client (aiohttp's, as textual.js would); the server is
    killed; the kernel ends the tab's console (its parent-death signal)."""
    import aiohttp

    run = make_run(tmp_path / "run", steps=10)
    with browser.Served(run) as served:
        async def tab_then_kill() -> list:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(served.base + "ws?width=100&height=30") as ws:
                    drawn = ""
                    while "10 steps" not in drawn:          # the console's first frame
                        message = await asyncio.wait_for(ws.receive(), browser.START_S)
                        assert message.type == aiohttp.WSMsgType.BINARY, message
                        drawn += message.data.decode(errors="replace")
                    tabs = served.tabs()
                    served.proc.kill()
                    served.proc.wait()
                    return tabs

        tabs = asyncio.run(tab_then_kill())
        assert len(tabs) == 1
        browser.wait_until(lambda: not processes_naming(tmp_path), what="the tab's console to end")


# -- the server's limits: tabs, idle connections, its descriptor limit ----------------

async def _first_frame(ws, text: str) -> None:
    import aiohttp

    drawn = ""
    while text not in drawn:
        message = await asyncio.wait_for(ws.receive(), browser.START_S)
        assert message.type == aiohttp.WSMsgType.BINARY, message
        drawn += message.data.decode(errors="replace")


def test_a_tab_past_max_tabs_gets_a_page_saying_why_and_no_console(tmp_path):
    import aiohttp

    run = make_run(tmp_path / "run", steps=10)
    with browser.Served(run, "--max-tabs", "1") as served:
        async def second_tab_while_one_is_open() -> tuple[int, str, int, int]:
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(served.base + "ws?width=100&height=30") as ws:
                    await _first_frame(ws, "10 steps")
                    async with session.get(served.base) as page:
                        text = await page.text()
                    refused = await session.get(served.base + "ws?width=80&height=24", headers={
                        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
                    return page.status, text, refused.status, len(served.tabs())

        page_status, text, ws_status, tabs = asyncio.run(second_tab_while_one_is_open())
        assert (page_status, ws_status, tabs) == (503, 503, 1), (page_status, ws_status, tabs)
        assert "1 tabs are open on this server, the most it runs" in text and "--max-tabs" in text, text
        browser.wait_until(lambda: not served.tabs(), what="the tab's console to end")
        assert status_of(served.base) == 200           # the tab closed: there is room again
        assert served.interrupt() == 0
    assert "the most --max-tabs allows" in served.output()


def test_half_sent_requests_at_the_descriptor_limit_leave_the_server_answering(tmp_path):
    """300 connections that send half a request's headers, against a server allowed 128
    descriptors: it keeps accepting (the oldest idle connections closed first), answers a
    normal GET meanwhile, closes the half-sent ones once idle past the bound, and its error
    log stays a few lines (it was a traceback per refused accept)."""
    import socket

    run = make_run(tmp_path / "run", steps=10)
    with browser.Served(run, open_files=128) as served:
        host, port = served.base.split("://", 1)[1].rstrip("/").split(":")
        held = []
        for _ in range(300):
            sock = socket.create_connection((host, int(port)), timeout=60)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(sock)
        assert status_of(served.base) == 200
        assert served.proc.poll() is None

        def closed_by_server(sock: socket.socket) -> bool:
            sock.settimeout(0.05)
            try:
                return sock.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        browser.wait_until(lambda: all(closed_by_server(sock) for sock in held),
                           what="the half-sent requests to be closed", detail=served.output)
        for sock in held:
            sock.close()
        assert status_of(served.base) == 200
        assert served.interrupt() == 0
    log = served.output()
    assert len(log.splitlines()) < 40, log
    assert "Traceback" not in log, log


def test_the_error_log_says_a_repeated_error_once_per_period_with_a_count():
    from console.web.limits import RateLimitedErrors

    said: list[str] = []
    now = [100.0]
    errors = RateLimitedErrors(said.append, every=10.0, clock=lambda: now[0])
    for _ in range(500):
        errors(None, {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many")})
    errors(None, {"message": "another"})
    now[0] += 10.0
    errors(None, {"message": "socket.accept() out of system resource"})
    assert said == ["socket.accept() out of system resource: OSError: [Errno 24] Too many", "another",
                    "socket.accept() out of system resource (499 more like it in the last 10 s)"]


def test_the_connection_cap_stays_under_the_descriptor_limit():
    from console.web.limits import connection_cap

    assert connection_cap(8, 256) == 256 - 48 - 32
    assert connection_cap(8, 1_000_000) == 1024
    assert connection_cap(8, 40) == 10             # never below the tabs it must serve
