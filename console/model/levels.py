"""How serious a finding or a notice is: one vocabulary for the problems, the alerts, the
event log and the styles that show them."""

from __future__ import annotations

from enum import Enum


class Level(str, Enum):
    """A level; its value is the word ``--check`` prints (``error:``, ``warning:``)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    GOOD = "good"           # something went right: a checkpoint landed, a trainer came back
    ACTION = "action"       # what the console itself did: a signal sent, a screen opened

    def __str__(self) -> str:
        return self.value
