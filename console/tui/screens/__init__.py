"""The console's screens: the dashboard, help, the stop confirmation, row details, the pivot and the rollback."""

from .confirm import ConfirmScreen
from .dashboard import DashboardScreen
from .detail import DetailScreen
from .help import HelpScreen
from .pivot_wizard import PivotScreen
from .rollback_wizard import RollbackScreen
from .series_picker import SeriesPicker

__all__ = ["ConfirmScreen", "DashboardScreen", "DetailScreen", "HelpScreen", "PivotScreen", "RollbackScreen", "SeriesPicker"]
