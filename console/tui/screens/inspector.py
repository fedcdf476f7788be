"""The checkpoint inspector (``i``): a checkpoint's tensors, sortable by any column.

The checkpoint is read by :func:`console.read.checkpoint_inspect.inspect_file` in a thread worker that
posts its progress (a bar while it reads) and its report; the screen never waits on the
file. ``[`` and ``]`` move to the older or newer checkpoint, ``a`` compares with the one
before it; closing the screen (Escape) cancels a read in progress.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, ProgressBar, Static
from textual.worker import get_current_worker

from rundir import CheckpointError
from rundir.layout import checkpoint_step

from ...model.format import LINE_LIMIT, printable
from ...model.inspect_report import InspectReport
from ...read.checkpoint_inspect import InspectCancelled, inspect_file
from ...text.inspect_format import describe, sorted_rows, table_columns, totals_line
from ..messages import InspectFinished, InspectProgress
from ..widgets.whole_columns import Column, WholeColumnsTable

# Columns sorted largest first when first chosen: what an operator looks for is the
# largest update, the most dead v, the most non-finite values.
ASCENDING_FIRST = ("#", "tensor")
# Narrower than this (an SSH session's 80 columns), the columns an operator reads first
# come right after the tensor's name, and the others follow.
FIRST_WHEN_NARROW = ("update_ratio", "dead_v", "nonfinite")
NARROW_BELOW = 120
# "#" and the tensor's name stay in view while the other columns scroll (← →), a whole column at a time.
FIXED_COLUMNS = 2


class InspectorScreen(Screen[None]):
    """One checkpoint's tensor table; ``checkpoints`` (oldest first) are the ones
    ``[``, ``]`` and ``a`` move between."""

    BINDINGS = [
        Binding("escape", "close", "back"),
        Binding("s", "next_sort", "sort column"),
        Binding("r", "reverse", "reverse"),
        Binding("left_square_bracket", "older", "older", key_display="["),
        Binding("right_square_bracket", "newer", "newer", key_display="]"),
        Binding("a", "against", "vs previous"),
    ]

    def __init__(self, path: Path, checkpoints: list[Path] | None = None):
        super().__init__(id="inspector")
        self.checkpoints = list(checkpoints or [path])
        self.index = self.checkpoints.index(path) if path in self.checkpoints else 0
        if path not in self.checkpoints:
            # One that cannot be read (an invalid checkpoint clicked in the pane) is shown
            # where its step puts it, so that [ and ] move on past it to its neighbours.
            step = checkpoint_step(path.name)
            before = [p for p in self.checkpoints if step is not None and (checkpoint_step(p.name) or 0) < step]
            self.index = len(before)
            self.checkpoints.insert(self.index, path)
        self.comparing = False
        self.report: InspectReport | None = None
        self.error = ""
        self.sort_column = "#"
        self.sort_reverse = False
        self._read = 0                 # the number of the read whose messages count

    @property
    def path(self) -> Path:
        return self.checkpoints[self.index]

    @property
    def against(self) -> Path | None:
        return self.checkpoints[self.index - 1] if self.comparing and self.index > 0 else None

    def compose(self) -> ComposeResult:
        yield Static(id="inspect-head")
        yield ProgressBar(total=100, show_eta=False, id="inspect-progress")
        yield WholeColumnsTable(fixed=FIXED_COLUMNS, follow_row=False, id="inspect-table", cursor_type="row",
                                zebra_stripes=True)
        yield Static(id="inspect-columns")
        yield Static(id="inspect-totals")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.start_read()

    def on_resize(self) -> None:
        table = self.query_one(WholeColumnsTable)
        if self.report is not None and \
                self.column_names()[FIXED_COLUMNS:] != [c.key for c in table.specs][FIXED_COLUMNS:]:
            self.fill_table()                   # across NARROW_BELOW: the other column order
        else:
            table.refit()

    def on_whole_columns_table_moved(self) -> None:
        """Under the table, where columns are out of view: which, and that ← → reach them."""
        self.query_one("#inspect-columns", Static).update(self.query_one(WholeColumnsTable).columns_hint())

    # -- reading -----------------------------------------------------------------
    def start_read(self) -> None:
        self.report, self.error = None, ""
        self._read += 1
        name = printable(self.path.name, LINE_LIMIT)
        against = f" against {printable(self.against.name, LINE_LIMIT)}" if self.against else ""
        self.query_one("#inspect-head", Static).update(Text(f"reading {name}{against} …"))
        bar = self.query_one(ProgressBar)
        bar.update(progress=0)
        bar.display = True
        self.query_one(WholeColumnsTable).set_data([], [])
        self.query_one("#inspect-totals", Static).update("")
        self.read(self._read, self.path, self.against)

    @work(thread=True, exclusive=True, group="inspect", exit_on_error=False)
    def read(self, number: int, path: Path, against: Path | None) -> None:
        worker = get_current_worker()
        last = [-1]

        def progress(done: int, total: int) -> None:
            percent = 100 * done // max(total, 1)
            if percent != last[0]:          # a message per percent, not per chunk
                last[0] = percent
                self.post_message(InspectProgress(number, percent))

        try:
            report = inspect_file(path, against, progress=progress, cancelled=lambda: worker.is_cancelled)
        except InspectCancelled:
            return
        except CheckpointError as err:
            self.post_message(InspectFinished(number, None, str(err)))
            return
        except OSError as err:
            self.post_message(InspectFinished(number, None, f"{path.name}: cannot read: {err.strerror or err}"))
            return
        if not worker.is_cancelled:
            self.post_message(InspectFinished(number, report))

    def on_inspect_progress(self, message: InspectProgress) -> None:
        if message.read == self._read and self.report is None and not self.error:
            self.query_one(ProgressBar).update(progress=message.percent)

    def on_inspect_finished(self, message: InspectFinished) -> None:
        if message.read != self._read:      # a read of a checkpoint no longer asked for
            return
        self.query_one(ProgressBar).display = False
        if message.report is None:
            self.error = message.error
            self.query_one("#inspect-head", Static).update(
                Text(f"cannot inspect: {printable(message.error, LINE_LIMIT)}", style="bold red"))
            return
        self.report = message.report
        head = Text()
        for i, line in enumerate(describe(self.report)):
            head.append(("\n" if i else "") + line, style="bold" if i == 0 else "")
        self.query_one("#inspect-head", Static).update(head)
        self.query_one("#inspect-totals", Static).update(Text(totals_line(self.report)))
        self.fill_table()

    # -- the table ---------------------------------------------------------------
    def columns(self) -> list:
        """The table's columns in the order shown: at narrow widths the ones read first
        (FIRST_WHEN_NARROW) come right after the tensor's name."""
        columns = list(table_columns(self.report is not None and self.report.against is not None))
        if self.app.size.width < NARROW_BELOW:
            first = sorted((c for c in columns if c[0] in FIRST_WHEN_NARROW),
                           key=lambda c: FIRST_WHEN_NARROW.index(c[0]))
            columns = columns[:1] + first + [c for c in columns[1:] if c not in first]
        return columns

    def column_names(self) -> list[str]:
        return ["#"] + [name for name, _, _ in self.columns()]

    def fill_table(self) -> None:
        """(Re)build the table in the chosen order; the sorted column's header says which way."""
        report = self.report
        if report is None:
            return
        columns = self.columns()
        arrow = " ▲" if not self.sort_reverse else " ▼"
        specs = [Column("#", "#" + (arrow if self.sort_column == "#" else ""), right=True)]
        specs += [Column(name, name + (arrow if name == self.sort_column else ""), right=right)
                  for name, _, right in columns]
        rows = []
        for index, t in sorted_rows(report.tensors, self.sort_column, self.sort_reverse):
            cells = [Text(str(index), justify="right")]
            for name, cell, right in columns:
                value = cell(t)
                style = "bold red" if name == "nonfinite" and value != "-" else ""
                cells.append(Text(value, justify="right" if right else "left", style=style))
            rows.append((str(index), cells))
        self.query_one(WholeColumnsTable).set_data(specs, rows)

    def sort_by(self, column: str) -> None:
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = column not in ASCENDING_FIRST
        self.fill_table()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def action_next_sort(self) -> None:
        names = self.column_names()
        column = names[(names.index(self.sort_column) + 1) % len(names)] if self.sort_column in names else "#"
        self.sort_column = column
        self.sort_reverse = column not in ASCENDING_FIRST
        self.fill_table()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.fill_table()

    # -- moving between checkpoints --------------------------------------------------
    def action_older(self) -> None:
        if self.index == 0:
            self.app.bell()
            return
        self.index -= 1
        self.start_read()

    def action_newer(self) -> None:
        if self.index >= len(self.checkpoints) - 1:
            self.app.bell()
            return
        self.index += 1
        self.start_read()

    def action_against(self) -> None:
        if not self.comparing and self.index == 0:
            self.app.bell()
            return
        self.comparing = not self.comparing
        self.start_read()

    def action_close(self) -> None:
        self.dismiss(None)
