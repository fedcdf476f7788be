"""``andrea-console RUN_DIR|RUNS_DIR --serve``: the dashboard (or the overview) in a browser.

textual-serve's ``AppService`` runs one console process per browser tab, Textual's web
driver speaking over its pipes; this module is the web server around it (aiohttp): the
page, the static files textual-serve ships (textual.js, xterm.js, the font) and one
websocket per tab.

Read-only by default: every tab's console runs with ``--read-only``, so the process itself
refuses the keys that signal or change a run, whatever a browser sends it. With
``--allow-control`` the tabs run without it, and the server asks for a secret token
(generated, printed once): the page and the websocket answer 403 without it, before any
tab's process starts. The token comes as ``?token=`` in the URL; the page's answer puts it
in a cookie (HttpOnly, SameSite=Strict) for the websocket, whose URL textual.js builds
without the page's query. Tokens are compared in constant time.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import html
import ipaddress
import json
import os
import secrets
import shlex
import signal
import socket
import sys
from pathlib import Path
from string import Template
from typing import Callable

import textual_serve
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager
from yarl import URL

from rundir.text import counted, printable

from ..actions.supervise import reap_children
from . import DEFAULT_MAX_TABS, SERVE_HOST, SERVE_PORT
from .limits import ConnectionGuard, RateLimitedErrors, connection_cap

TOKEN_PARAM = "token"
# A tab's console is asked to quit when its tab closes; it is killed if it has not ended this
# many seconds later.
QUIT_GRACE_S = 10.0
REAP_S = 2.0
STATIC_DIR = Path(textual_serve.__file__).resolve().parent / "static"
PAGE_FILE = Path(__file__).with_name("serve_page.html")

Say = Callable[[str], None]


def tab_command(target: Path, args: argparse.Namespace) -> list[str]:
    """The console that one browser tab runs: ``andrea-console TARGET`` with the display
    options ``--serve`` was given, and ``--read-only`` unless ``--allow-control``."""
    script = Path(sys.executable).with_name("andrea-console")
    # The script, not ``python -m console``: -m would look for the package in the current
    # directory first.
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "console"]
    argv += [str(target.resolve()), "--smooth", repr(args.smooth), "--window", str(args.window)]
    for flag, value in (("--stall-after", args.stall_after), ("--spike-window", args.spike_window),
                        ("--spike-k", args.spike_k)):
        if value is not None:
            argv += [flag, repr(value)]
    if args.no_bell:
        argv.append("--no-bell")
    if not args.allow_control:
        argv.append("--read-only")
    return argv


def is_loopback_name(name: str | None) -> bool:
    if not name:
        return False
    name = name.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(origin: str, request: web.Request) -> bool:
    """Whether an Origin header names this server: an origin is a scheme, a host and a port (a
    default port written or left out alike), so ``https://HOST:PORT`` is not this plain-HTTP
    server's, whatever its host and port."""
    try:
        url = URL(origin)
    except ValueError:
        return False
    if not url.absolute:
        return False
    return (url.scheme, url.host, url.port) == (request.scheme, request.url.host, request.url.port)


def cookie_name(port: int) -> str:
    # Cookies are per host, not per port: two servers on one host keep theirs apart.
    return f"andrea-console-token-{port}"


class Gate:
    """Who may open the page and a tab. Bound to loopback, only a loopback Host header (a
    site whose name rebinds to 127.0.0.1 gets 403); a websocket only from the page's own
    origin (another site's page in the same browser cannot open a tab); with a token, only
    a request that carries it."""

    def __init__(self, token: str | None, loopback: bool, port: int):
        self.token, self.loopback, self.port = token, loopback, port

    def refusal(self, request: web.Request) -> str | None:
        if self.loopback and not is_loopback_name(request.url.host):
            return "this server answers to localhost only"
        origin = request.headers.get("Origin")
        if request.path == "/ws" and origin is not None and not same_origin(origin, request):
            return f"a websocket from another origin ({printable(origin, 80)})"
        if self.token is None:
            return None
        given = request.query.get(TOKEN_PARAM) or request.cookies.get(cookie_name(self.port)) or ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode()):
            return "this console can signal the run: open the URL with the token that --serve printed"
        return None


def _end_with(parent: int) -> Callable[[], None] | None:
    """For a child about to exec: SIGKILL it when ``parent`` dies, however it dies (Linux's
    parent-death signal), so that a server killed with SIGKILL leaves no tab's console
    behind. Not SIGTERM: with its pipes gone, Textual's web driver neither ends at the end
    of its input nor gets through a clean exit (which writes to them); and a console has
    nothing to save (the guided operations are journalled and resume). None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:          # it died before the line above
            os.kill(os.getpid(), signal.SIGKILL)
    return arm


class TabProcess(AppService):
    """textual-serve's AppService with its process started without a shell (a run
    directory's name is never parsed by one), in a session of its own (Ctrl-C at the
    server's terminal reaches the server alone, which then ends every tab in order), and
    ended by the kernel if the server dies."""

    def __init__(self, argv: list[str], **kwargs) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = argv

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height),
            start_new_session=True, preexec_fn=_end_with(os.getpid()))
        self._stdin = process.stdin
        return process

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def run(self) -> None:
        await super().run()
        # The console's output ended (q, or it failed to start): the page says the session
        # ended, rather than waiting on a websocket nothing will write to again.
        await self.remote_close()

    async def end(self, grace: float = QUIT_GRACE_S) -> None:
        """Ask the console to quit and wait for it to exit; after ``grace`` seconds, kill its session."""
        process = self._process
        if process is None:                 # it never started
            return

        async def quit_and_exit() -> None:
            await self.stop()
            await process.wait()

        try:
            await asyncio.wait_for(quit_and_exit(), grace)
        except asyncio.TimeoutError:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            await process.wait()


def _int_param(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(value))) if value is not None else default
    except ValueError:
        return default


class DashboardServer:
    """The aiohttp application: ``/`` the page, ``/ws`` one tab's console, ``/static``."""

    def __init__(self, tab_argv: list[str], title: str, gate: Gate, say: Say, max_tabs: int):
        self.tab_argv, self.title, self.gate, self.say = tab_argv, title, gate, say
        self.page = Template(PAGE_FILE.read_text(encoding="utf-8"))
        self.tabs: dict[TabProcess, web.WebSocketResponse] = {}
        self.downloads = DownloadManager()
        self.max_tabs = max_tabs
        self.guard = ConnectionGuard(connection_cap(max_tabs))

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard.middleware, self._check])
        app.add_routes([web.get("/", self.index), web.get("/ws", self.websocket),
                        web.static("/static", STATIC_DIR)])
        return app

    @web.middleware
    async def _check(self, request: web.Request, handler) -> web.StreamResponse:
        if not request.path.startswith("/static/"):
            why = self.gate.refusal(request)
            if why is not None:
                # Before any tab's process starts.
                self.say(f"refused {request.method} {printable(request.path, 80)} from {request.remote}: {why}")
                raise web.HTTPForbidden(text=f"403 Forbidden: {why}\n")
        return await handler(request)

    def _tabs_full(self, request: web.Request) -> web.Response | None:
        """A page saying why, where every tab this server runs is open (None: one is free)."""
        if len(self.tabs) < self.max_tabs:
            return None
        self.say(f"refused {request.method} {printable(request.path, 80)} from {request.remote}: "
                 f"{len(self.tabs)} tabs open, the most --max-tabs allows")
        why = (f"{len(self.tabs)} tabs are open on this server, the most it runs (each runs a console process; "
               "--max-tabs sets the number): close one and reload")
        return web.Response(status=503, text=f"503 Service Unavailable: {why}\n",
                            headers={"Cache-Control": "no-store", "Retry-After": "10"})

    async def index(self, request: web.Request) -> web.Response:
        full = self._tabs_full(request)
        if full is not None:
            return full
        # The websocket at the host the browser used: behind `ssh -L 9000:...` that is
        # localhost:9000, not this server's own address.
        websocket_url = f"{'wss' if request.secure else 'ws'}://{request.host}/ws"
        body = self.page.substitute(title=html.escape(self.title), websocket_url=html.escape(websocket_url),
                                    font_size=_int_param(request.query.get("fontsize"), 16, 6, 48))
        response = web.Response(text=body, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"        # the token never leaves in a Referer
        if self.gate.token is not None:
            response.set_cookie(cookie_name(self.gate.port), self.gate.token, httponly=True, samesite="Strict",
                                path="/")
        return response

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        full = self._tabs_full(request)         # before any process starts
        if full is not None:
            return full
        width = _int_param(request.query.get("width"), 80, 20, 1000)
        height = _int_param(request.query.get("height"), 24, 5, 500)
        ws = web.WebSocketResponse(heartbeat=15)
        await ws.prepare(request)
        tab = TabProcess(self.tab_argv, write_bytes=ws.send_bytes, write_str=ws.send_str, close=ws.close,
                         download_manager=self.downloads)
        self.tabs[tab] = ws
        try:
            await tab.start(width, height)
            self.say(f"tab opened from {request.remote}: console pid {tab.pid} ({len(self.tabs)} open)")
            await self._relay(ws, tab)
        except OSError as err:
            self.say(f"cannot start a tab's console ({shlex.join(self.tab_argv)}): {err}")
        finally:
            await tab.end()
            self.tabs.pop(tab, None)
            if tab.pid is not None:
                self.say(f"tab closed: console pid {tab.pid} ended ({len(self.tabs)} open)")
            await ws.close()
        return ws

    @staticmethod
    async def _relay(ws: web.WebSocketResponse, tab: TabProcess) -> None:
        """What the browser sends, to the tab's console (textual.js's messages); anything
        malformed is dropped."""
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
                kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if kind == "stdin" and isinstance(data, str):
                await tab.send_bytes(data.encode("utf-8"))
            elif kind == "resize" and isinstance(data, dict):
                await tab.set_terminal_size(_int_param(str(data.get("width")), 80, 20, 1000),
                                            _int_param(str(data.get("height")), 24, 5, 500))
            elif kind == "ping":
                await ws.send_json(["pong", data])
            elif kind == "blur":
                await tab.blur()
            elif kind == "focus":
                await tab.focus()

    async def end_tabs(self) -> int:
        """End every tab's console, and close its websocket (the page says the session ended)."""
        tabs = dict(self.tabs)
        await asyncio.gather(*(tab.end() for tab in tabs))
        await asyncio.gather(*(ws.close() for ws in tabs.values()))
        return len(tabs)

    async def run(self, sock: socket.socket, stop: asyncio.Event) -> int:
        """Serve on ``sock`` until ``stop`` is set; then end every tab's console. How many were open."""
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False, shutdown_timeout=5.0)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        asyncio.get_running_loop().set_exception_handler(RateLimitedErrors(self.say))
        assert runner.server is not None
        tasks = [asyncio.create_task(_reap_every(REAP_S)), asyncio.create_task(self.guard.run(runner.server))]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            ended = await self.end_tabs()
            await runner.cleanup()
        return ended


async def _reap_every(seconds: float) -> None:
    while True:                 # a trainer --start started here and since exited: no zombie
        reap_children()
        await asyncio.sleep(seconds)


def resolve(host: str, port: int) -> tuple[list[tuple], bool]:
    """The addresses ``host`` names, and whether every one is a loopback address."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos, all(is_loopback_name(info[4][0].split("%")[0]) for info in infos)


def listen(info: tuple) -> socket.socket:
    """A listening socket at ``info`` (a getaddrinfo entry; port 0: any free port)."""
    family, kind, proto, _, address = info
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(host: str, port: int, token: str | None) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/" + (f"?{TOKEN_PARAM}={token}" if token else "")


def serve(target: Path, args: argparse.Namespace, fail: Callable[[str, int], int],
          ask: Callable[[str], bool]) -> int:
    """``--serve``: serve ``target`` until Ctrl-C (or SIGTERM); an exit status."""
    host = SERVE_HOST if args.host is None else args.host
    port = SERVE_PORT if args.port is None else args.port
    try:
        infos, loopback = resolve(host, port)
    except OSError as err:
        return fail(f"--host {host}: {getattr(err, 'strerror', None) or err}", 2)
    if args.allow_control and not loopback and not ask(
            f"--allow-control on {host}, which is not localhost: anyone who reaches port {port} with the token "
            f"can checkpoint, stop, pivot or roll back {target}. Serve it?"):
        return fail("--allow-control off localhost was not confirmed: nothing served", 1)
    try:
        sock = listen(infos[0])
    except OSError as err:
        return fail(f"--serve: cannot listen on {host}:{port}: {getattr(err, 'strerror', None) or err}", 1)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32) if args.allow_control else None

    def say(text: str) -> None:
        print(f"andrea-console: {text}", file=sys.stderr, flush=True)

    server = DashboardServer(tab_command(target, args), f"andrea-console · {target.resolve().name}",
                             Gate(token, loopback, port), say,
                             DEFAULT_MAX_TABS if args.max_tabs is None else args.max_tabs)
    mode = ("with control (c, s, p, r act; the token is printed only here)" if token
            else "read-only (--allow-control to signal from the browser)")
    say(f"serving {printable(str(target), None)} {mode}; each browser tab runs its own console; Ctrl-C stops")
    print(url_of(host, port, token), flush=True)
    if loopback:
        say(f"from another machine: ssh -N -L {port}:localhost:{port} {socket.gethostname()}, "
            "then open the URL above there")
    elif not token:
        say(f"listening on {host}: anyone who reaches port {port} sees the run (read-only)")

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await server.run(sock, stop)

    ended = asyncio.run(main())
    say(f"stopped; {counted(ended, 'tab console')} ended")
    return 0
