"""The command line's checks of ``--serve`` and ``--read-only``: which options go together."""

from __future__ import annotations

import argparse

from ..web import MAX_TABS_LIMIT


def serve_usage(args: argparse.Namespace) -> str | None:
    """Why the --serve and --read-only options do not go together as given (None: they do)."""
    if (args.host is not None or args.port is not None or args.allow_control
            or args.max_tabs is not None) and not args.serve:
        return "--host, --port, --allow-control and --max-tabs go with --serve"
    if args.read_only and args.allow_control:
        return "--read-only and --allow-control contradict each other"
    if args.max_tabs is not None and not 1 <= args.max_tabs <= MAX_TABS_LIMIT:
        return f"--max-tabs {args.max_tabs}: expected 1 to {MAX_TABS_LIMIT}"
    if args.port is not None and not 0 <= args.port <= 65535:
        return f"--port {args.port}: expected 0 to 65535 (0: any free port)"
    changes = [flag for flag, on in (("--start", args.start), ("--checkpoint", args.checkpoint),
                                     ("--stop", args.stop), ("--pivot", args.pivot),
                                     ("--pivot-rollback", args.pivot_rollback), ("--rollback", args.rollback)) if on]
    if changes and (args.read_only or args.serve and not args.allow_control):
        return (f"{changes[0]}: refused: this console is read-only (--serve without --allow-control, or "
                "--read-only), it never signals or changes a run")
    if args.serve and (args.inspect is not None or args.against):
        return "--inspect does not go with --serve (the dashboard's i key inspects)"
    if args.serve and args.notify is not None:
        return "--notify does not go with --serve: every open tab would run it (use a terminal console or --check)"
    return None
