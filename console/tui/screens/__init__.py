"""The console's screens: the dashboard (and a run's opened from the overview), help, the stop
confirmation, row details, the pivot and the rollback. The overview, the comparison, the
inspector and the ranks are imported where they are opened."""

from .confirm import ConfirmScreen
from .dashboard import DashboardScreen, RunDashboardScreen
from .detail import DetailScreen
from .help import HelpScreen
from .pivot_wizard import PivotScreen
from .rollback_wizard import RollbackScreen
from .series_picker import SeriesPicker

__all__ = ["ConfirmScreen", "DashboardScreen", "DetailScreen", "HelpScreen", "PivotScreen", "RollbackScreen",
           "RunDashboardScreen", "SeriesPicker"]
