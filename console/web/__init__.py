"""``--serve``: the dashboard in a browser (:mod:`.serve`, which imports aiohttp and
textual-serve, so only when asked for). Its defaults live here, for the command line's help.
"""

SERVE_HOST, SERVE_PORT = "127.0.0.1", 8765      # --serve's defaults
# Each tab runs a console process of its own (some 60 MB): at most this many at once.
DEFAULT_MAX_TABS, MAX_TABS_LIMIT = 8, 256
