"""Lines of parts laid out at the width they are drawn at, each part whole or left out.

A Static's ellipsis cuts wherever the width ends ("polling · f…"); :class:`WholeParts`
drops a part that does not fit instead, so that what is shown is never half a word."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

SEP = (" · ", "grey50")


def cut_at_word(text: Text, width: int) -> Text:
    """``text`` in ``width`` cells: whole if it fits, else up to its last whole word
    that fits, then "…" (a single word wider than ``width`` is cut: there is nothing else)."""
    if text.cell_len <= width:
        return text
    end = text.plain.rfind(" ", 0, max(width - 1, 0))
    end = end if end > 0 else max(width - 1, 0)
    out = text[:end]
    out.rstrip()
    while out.cell_len > width - 1 and len(out):
        out = out[:-1]
    out.append("…")
    return out


class WholeParts:
    """Lines of parts, laid out at the width they are drawn at: a part is shown whole or
    left out (the status pane, key 6, says every one), never cut; only a line's first part,
    prose (an alert, a problem, why the trainer is not running), is cut, at a word."""

    def __init__(self, lines: list[list[Text]]):
        self.lines = lines

    @property
    def plain(self) -> str:
        return "\n".join(" · ".join(part.plain for part in parts) for parts in self.lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        drawn = []
        for parts in self.lines:
            line = Text(no_wrap=True, overflow="crop")
            for i, part in enumerate(parts):
                sep = Text(SEP[0], style=SEP[1]) if i else Text()
                if line.cell_len + sep.cell_len + part.cell_len <= width:
                    line.append_text(sep)
                    line.append_text(part)
                elif i == 0:
                    line.append_text(cut_at_word(part, width))
            drawn.append(line)
        yield Text("\n", no_wrap=True).join(drawn)
