"""The console's screens: the dashboard, help, the stop confirmation, row details and the pivot hook."""

from .confirm import ConfirmScreen
from .dashboard import DashboardScreen
from .detail import DetailScreen
from .help import HelpScreen
from .pivot_wizard import PivotScreen

__all__ = ["ConfirmScreen", "DashboardScreen", "DetailScreen", "HelpScreen", "PivotScreen"]
