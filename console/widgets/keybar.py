"""The dashboard's footer: its keys on one line (``c checkpoint  s stop ...``), each clickable.

Textual's Footer builds and styles a widget per key and rebuilds them whenever the
bindings change. The dashboard's keys are fixed, and drawing them as one line of Text
brings its first full frame about 0.1 s sooner (bench console)."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static


# Kept in the bar at any width: the keys that act on the run, quitting, and the help that
# lists every other key.
ESSENTIAL_ACTIONS = frozenset({"checkpoint", "stop", "pivot", "quit", "help", "open_run", "back"})


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
        shown = [(key, active.binding) for key, active in self.screen.active_bindings.items() if active.binding.show]
        width = self.size.width

        def length(entries, gap: int) -> int:
            return sum(len(self.app.get_key_display(b)) + 1 + len(b.description) + gap for _, b in entries)

        # At 80 columns the keys are closer together; where even that does not fit, the
        # optional ones go, newest first, so that the essential ones (and ``? help``, which
        # lists them all) stay in view.
        gap = 2 if length(shown, 2) <= width else 1
        while length(shown, gap) > width:
            optional = [i for i, (_, b) in enumerate(shown) if b.action not in ESSENTIAL_ACTIONS]
            if not optional:
                break
            del shown[optional[-1]]
        self.keys = []
        text = Text(no_wrap=True, overflow="ellipsis")
        for key, binding in shown:
            start = len(text)
            text.append(self.app.get_key_display(binding), style=key_style)
            text.append(f" {binding.description}", style=description_style)
            self.keys.append((start, len(text), key))
            text.append(" " * gap)
        for keys, what in self.hints:
            if len(text) + len(keys) + len(what) + 1 > width:
                break
            text.append(keys, style=key_style)
            text.append(f" {what}", style=description_style)
            text.append("  ")
        self.update(text)

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self.keys:
            if start <= event.x < end:
                self.app.simulate_key(key)            # as a key press, like Textual's Footer
