"""What one ``--serve`` process lets its clients hold: tabs, connections, time, log lines.

Each browser tab runs a console process of its own (some 60 MB), so their number is capped
(``--max-tabs``); a tab past the cap gets a page saying why, and no process. A connection
that is not in an exchange (request, response, websocket session) for ``IDLE_S`` is closed:
a client that sends half a request's headers, or keeps an idle keep-alive connection, holds
a descriptor for that long at most. The connections are capped below the process's
descriptor limit, the oldest idle ones closed first, so that a burst of them never leaves the
server unable to accept the next normal request; and the event loop's error log says a
repeated error once per ``LOG_EVERY_S`` with a count, where an exhausted descriptor table
had it print one traceback per refused accept.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any, Callable

from aiohttp import web

IDLE_S = 10.0
SWEEP_S = 0.5
LOG_EVERY_S = 10.0
# Descriptors kept for what is not a client's connection: the listening socket, the
# interpreter's files, the event loop's own; and per tab, its console's three pipes.
RESERVED_FDS = 48
FDS_PER_TAB = 4
CONNECTIONS_AT_MOST = 1024


def connection_cap(max_tabs: int, soft_limit: int | None = None) -> int:
    """How many client connections to keep at most under the descriptor limit."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY:
        return CONNECTIONS_AT_MOST
    return max(max_tabs + 2, min(CONNECTIONS_AT_MOST, soft_limit - RESERVED_FDS - FDS_PER_TAB * max_tabs))


class ConnectionGuard:
    """Closes connections idle past ``idle_s`` and the oldest idle ones past ``cap``.

    A connection is in an exchange from the moment its request's headers are read until its
    response is sent whole (``middleware``): aiohttp sends a returned response after the
    handler returns, so the middleware sends it itself, and a slow download is not idle.
    """

    def __init__(self, cap: int, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic):
        self.cap, self.idle_s, self.clock = cap, idle_s, clock
        self.busy: dict[Any, int] = {}          # handler -> exchanges in progress
        self.idle_since: dict[Any, float] = {}
        self.closed_idle = self.closed_over_cap = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        protocol = request.protocol
        self.busy[protocol] = self.busy.get(protocol, 0) + 1
        try:
            response = await handler(request)
            await response.prepare(request)
            await response.write_eof()
            return response
        finally:
            left = self.busy.pop(protocol) - 1
            if left:
                self.busy[protocol] = left
            self.idle_since[protocol] = self.clock()

    def sweep(self, connections: list) -> None:
        """One look at the server's connections (oldest first, as aiohttp keeps them)."""
        now = self.clock()
        live = set(connections)
        for gone in [c for c in self.idle_since if c not in live]:
            del self.idle_since[gone]
        idle = [c for c in connections if c not in self.busy]
        kept = []
        for connection in idle:
            since = self.idle_since.setdefault(connection, now)
            if now - since >= self.idle_s:
                self._close(connection)
                self.closed_idle += 1
            else:
                kept.append(connection)
        over = len(live) - (len(idle) - len(kept)) - self.cap
        for connection in kept[:max(0, over)]:
            self._close(connection)
            self.closed_over_cap += 1

    def _close(self, connection: Any) -> None:
        self.idle_since.pop(connection, None)
        connection.force_close()

    async def run(self, server: web.Server) -> None:
        while True:
            self.sweep(server.connections)
            await asyncio.sleep(SWEEP_S)


class RateLimitedErrors:
    """An event loop's exception handler that passes an error on once per ``every`` seconds
    per message, saying how many like it were dropped in between."""

    def __init__(self, say: Callable[[str], None], every: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.say, self.every, self.clock = say, every, clock
        self.last: dict[str, float] = {}
        self.dropped: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        message = str(context.get("message") or "error in the event loop")
        now = self.clock()
        if now - self.last.get(message, -self.every) < self.every:
            self.dropped[message] = self.dropped.get(message, 0) + 1
            return
        self.last[message] = now
        dropped = self.dropped.pop(message, 0)
        error = context.get("exception")
        detail = f": {type(error).__name__}: {error}" if error is not None else ""
        more = f" ({dropped} more like it in the last {self.every:.0f} s)" if dropped else ""
        self.say(f"{message}{detail}{more}")
