"""Reading ``.loss.json`` the way the tests of faults must: torn or damaged lines (which
these tests cause on purpose) are skipped, as every reader of the contract skips them."""

from __future__ import annotations

from pathlib import Path

import orjson


def lines(run: Path) -> list[dict]:
    """Every whole, readable line of ``.loss.json``."""
    path = run / ".loss.json"
    if not path.exists():
        return []
    data = path.read_bytes()
    out = []
    for line in data[:data.rfind(b"\n") + 1].splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def events(run: Path, name: str) -> list[dict]:
    return [r for r in lines(run) if r.get("event") == name]


def step_lines(run: Path) -> list[dict]:
    return [r for r in lines(run) if "event" not in r]
