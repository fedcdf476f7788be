"""One widget per dashboard pane; each takes a :class:`~console.model.snapshot.RunSnapshot` and
repaints only when its own part of it changed."""

from .arms import ArmsPane
from .checkpoints import CheckpointsPane
from .events import EventLog
from .keybar import KeyBar
from .loss_plot import LossPlot
from .problems import ProblemsBar
from .samples import SamplesPane
from .status import StatusPane
from .status_line import StatusLine

__all__ = ["ArmsPane", "CheckpointsPane", "EventLog", "KeyBar", "LossPlot", "ProblemsBar", "SamplesPane",
           "StatusLine", "StatusPane"]
