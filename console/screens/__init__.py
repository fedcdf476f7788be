"""The console's screens: the dashboard, help, the stop confirmation and the pivot hook."""

from .confirm import ConfirmScreen
from .dashboard import DashboardScreen
from .help import HelpScreen
from .pivot_wizard import PivotScreen

__all__ = ["ConfirmScreen", "DashboardScreen", "HelpScreen", "PivotScreen"]
