"""The console's screens: the dashboard, help, the stop confirmation, the pivot and the rollback."""

from .confirm import ConfirmScreen
from .dashboard import DashboardScreen
from .help import HelpScreen
from .pivot_wizard import PivotScreen
from .rollback_wizard import RollbackScreen

__all__ = ["ConfirmScreen", "DashboardScreen", "HelpScreen", "PivotScreen", "RollbackScreen"]
