"""The dashboard's footer: its keys on one line (``c checkpoint  s stop ...``), each clickable.

Textual's Footer builds and styles a widget per key and rebuilds them whenever the
bindings change. The dashboard's keys are fixed, and drawing them as one line of Text
brings its first full frame about 0.1 s sooner (bench console)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import Static

# ESSENTIAL_ACTIONS: kept in the bar at any width (console.tui.keys says which): the keys that
# act on the run, quitting, and the help that lists every other key.
from ..keys import CONTROL_ACTIONS, ESSENTIAL_ACTIONS


class KeyBar(Static):
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        .key-bar--key { color: $footer-key-foreground; text-style: bold; }
        .key-bar--description { color: $footer-description-foreground; }
    }
    """

    def __init__(self, hints: tuple[tuple[str, str], ...] = (), **kwargs) -> None:
        super().__init__("", **kwargs)
        self.hints = hints                                # (keys, what): said after the keys where they fit
        self.keys: list[tuple[int, int, str]] = []       # (first column, end column, key)

    _drawn_width = -1

    def on_resize(self) -> None:
        # Drawn once it has a width (the hints are said only where they fit), again if it changes.
        if self.size.width != self._drawn_width:
            self._drawn_width = self.size.width
            self.draw()

    def draw(self) -> None:
        key_style = self.get_component_rich_style("key-bar--key")
        description_style = self.get_component_rich_style("key-bar--description")
        # A read-only console refuses the keys that signal or change a run: not offered.
        refused = CONTROL_ACTIONS if getattr(self.app, "read_only", False) else {}
        bindings = [(key, active.binding) for key, active in self.screen.active_bindings.items()
                    if active.binding.show and active.binding.action.removeprefix("app.") not in refused]
        entries = self.fit(bindings, self.size.width)
        gap = entries[0][1] if entries else 2
        self.keys = []
        text = Text(no_wrap=True, overflow="ellipsis")
        if refused:
            text.append("read-only", style=description_style + Style(italic=True))
            text.append(" " * gap)
        for members, _, description in entries:
            for i, (key, binding) in enumerate(members):
                start = len(text)
                text.append(("" if i == 0 else " ") + self.app.get_key_display(binding), style=key_style)
                self.keys.append((start + (i > 0), len(text), key))
            text.append(f" {description}", style=description_style)
            text.append(" " * gap)
        for keys, what in self.hints:          # each that fits, in order (a shorter one after one that does not)
            if len(text) + len(keys) + len(what) + 1 > self.size.width:
                continue
            text.append(keys, style=key_style)
            text.append(f" {what}", style=description_style)
            text.append("  ")
        self.update(text)

    def fit(self, bindings: list[tuple[str, Binding]], width: int) -> list[tuple[list[tuple[str, Binding]], int, str]]:
        """The entries drawn at ``width``: (their keys and bindings, the gap after them,
        the description). Each key with its own description where they all fit (2 columns
        apart, else 1); else a group's keys (``Binding.group``) share its description
        (``l w e x plot``); where even that does not fit, the optional entries go, newest
        first, so that the essential ones (and ``? help``, which lists them all) stay in view."""
        display = self.app.get_key_display

        def length(entries: list[tuple[list[tuple[str, Binding]], str]], gap: int) -> int:
            return sum(sum(len(display(b)) + 1 for _, b in members) + len(what) + gap for members, what in entries)

        single = [([(key, b)], b.description) for key, b in bindings]
        grouped: list[tuple[list[tuple[str, Binding]], str]] = []
        for key, b in bindings:
            if b.group is not None and grouped and grouped[-1][0][-1][1].group is b.group:
                grouped[-1][0].append((key, b))
            else:
                grouped.append(([(key, b)], b.group.description if b.group else b.description))
        for entries, gap in ((single, 2), (single, 1), (grouped, 2), (grouped, 1)):
            if length(entries, gap) <= width:
                return [(members, gap, what) for members, what in entries]
        entries = grouped
        while length(entries, 1) > width:
            optional = [i for i, (members, _) in enumerate(entries)
                        if all(b.action.removeprefix("app.") not in ESSENTIAL_ACTIONS for _, b in members)]
            if not optional:
                break
            entries = entries[:optional[-1]] + entries[optional[-1] + 1:]
        return [(members, 1, what) for members, what in entries]

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self.keys:
            if start <= event.x < end:
                self.app.simulate_key(key)            # as a key press, like Textual's Footer
