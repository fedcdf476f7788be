"""What the console says about the history's mirror (:mod:`console.read.history_mirror`), as a
typed record: a module of its own, light enough for the start-up's forked child."""

from __future__ import annotations

from dataclasses import dataclass

from .format import LINE_LIMIT, printable
from .levels import Level

# What a read did with the history's mirror (console.read.mirror_file) that is worth saying:
# the mirror did not match the history and was made again, the cache could not be written
# (the next start parses again), or a mirror used was found stale by its full check after
# the first frame (the history was re-read from the file). A mirror used, or made for the
# first time, is not news.
MIRROR_REBUILT, MIRROR_NOT_SAVED, MIRROR_STALE = "rebuilt", "not saved", "stale"
MIRROR_NOTES = (MIRROR_REBUILT, MIRROR_NOT_SAVED, MIRROR_STALE)


@dataclass(frozen=True)
class MirrorNote:
    """What happened to the history's mirror: ``kind`` (one of :data:`MIRROR_NOTES`) and why."""

    kind: str
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in MIRROR_NOTES:
            raise ValueError(f"unknown mirror note {self.kind!r}")
        object.__setattr__(self, "reason", printable(self.reason, LINE_LIMIT))

    @property
    def level(self) -> Level:
        return Level.WARNING if self.kind in (MIRROR_NOT_SAVED, MIRROR_STALE) else Level.INFO

    def text(self) -> str:
        """One line: what happened, why, and what it costs."""
        if self.kind == MIRROR_REBUILT:
            return f"history mirror rebuilt: {self.reason}"
        if self.kind == MIRROR_STALE:
            return f"history mirror stale: {self.reason} (what was shown until now came from it)"
        return f"history mirror not saved: {self.reason} (the next start parses the history again)"
