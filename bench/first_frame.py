"""The first-frame hook of the console benches, in a module of its own: it is imported in
the measured process, so it imports nothing but ``time`` (and the console's own tuning)."""

from __future__ import annotations

import time
from typing import Callable


def tuned_as_the_command_line() -> None:
    """The measured process tuned as ``andrea-console``'s entry tunes its own (console/cli.py:
    its numpy's environment, before numpy is imported, and the allocator)."""
    from console import tune_allocator, tune_environment

    tune_environment()
    tune_allocator()


def exit_after_first_frame(painted: list[float]) -> Callable[[type], type]:
    """A ``customize`` hook for the console's apps: the app records ``time.time()`` in
    ``painted`` once its first full frame is painted (``started``), then exits."""
    def customize(app_class: type) -> type:
        class Once(app_class):
            def started(self) -> None:
                super().started()
                if not painted:
                    painted.append(time.time())
                    self.exit()

        return Once

    return customize

