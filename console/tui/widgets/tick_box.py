"""A checkbox whose state is a glyph as well as a colour: ``[x]`` ticked, ``[ ]`` not.

Textual's Checkbox draws ``▐X▌`` either way and tells them apart by colour only: on a
low-contrast terminal, or copied as text, an unticked box reads as ticked."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Checkbox


class TickBox(Checkbox):
    TICKED, UNTICKED = "x", " "

    @property
    def _button(self) -> Content:
        style = self.get_visual_style("toggle--button")
        return Content.assemble("[", (self.TICKED if self.value else self.UNTICKED, style), "]")
