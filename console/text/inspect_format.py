"""What an inspection says, as text: the columns of the tensor table (shared by
``--inspect`` and the inspector screen), the lines above it and the totals."""

from __future__ import annotations

from rundir.text import printable

from ..model.inspect_report import InspectReport, TensorStats


def number(value: float | None) -> str:
    """A statistic in four significant digits; "-" when there is none."""
    return "-" if value is None else f"{value:.4g}"


def nonfinite_cell(counts: dict[str, int]) -> str:
    """``-`` when every value is finite, else ``w:2 v:1``."""
    bad = [f"{key}:{count:,}" for key, count in counts.items() if count]
    return " ".join(bad) if bad else "-"


def shape_cell(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


# (header, cell of a tensor, right-aligned); the comparison's two come last, with --against
COLUMNS = (
    ("tensor", lambda t: printable(t.name, 60), False),
    ("shape", lambda t: shape_cell(t.shape), True),
    ("count", lambda t: f"{t.count:,}", True),
    ("w_rms", lambda t: number(t.w_rms), True),
    ("w_maxabs", lambda t: number(t.w_maxabs), True),
    ("m_norm", lambda t: number(t.m_norm), True),
    ("sqrt_v_rms", lambda t: number(t.sqrt_v_rms), True),
    ("dead_v", lambda t: number(t.dead_v_frac), True),
    ("update_ratio", lambda t: number(t.update_ratio), True),
    ("nonfinite", lambda t: nonfinite_cell(t.nonfinite), False),
)
AGAINST_COLUMNS = (
    ("w_rel_change", lambda t: number(t.w_rel_change), True),
    ("m_cosine", lambda t: number(t.m_cosine), True),
)


def table_columns(against: bool):
    return COLUMNS + AGAINST_COLUMNS if against else COLUMNS


def describe(report: InspectReport) -> list[str]:
    """The lines above the table: which checkpoint, how it is cut, what the ratio knows."""
    c = report.checkpoint
    adam = f"Adam step {c.adam_step:,}" if c.adam_step is not None else "Adam step unknown"
    lines = [f"{printable(c.path.name, None)}: step {c.step:,} · {c.n_params:,} parameters · {adam} · {report.status}"]
    if report.layout.kind == "model":
        lines.append(f"tensors: {len(report.tensors)}, from the .json's model config, in parameter order")
    else:
        lines.append(f"tensors: {printable(report.layout.note, None)}")
    if report.adam.unknown:
        lines.append(f"update_ratio: unknown: {printable(report.adam.unknown, None)}")
    else:
        lines.append(f"update_ratio: lr {report.adam.lr:g} x RMS(m_hat / (sqrt(v_hat) + {report.adam.eps:g})) "
                     f"/ w_rms; dead_v: share of v < eps^2")
    if report.against is not None:
        a = report.against
        lines.append(f"against {printable(a.path.name, None)}: step {a.step:,} · w_rel_change = |w - w'| / |w'|, "
                     f"m_cosine = cos(m, m')")
    return lines


def totals_line(report: InspectReport) -> str:
    return "totals: " + "  ".join(f"{key} {number(value)}" for key, value in report.totals.items())


def render_report(report: InspectReport) -> str:
    """The report as text: the description, an aligned table, the totals."""
    columns = table_columns(report.against is not None)
    rows = [[cell(t) for _, cell, _ in columns] for t in report.tensors]
    widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, (name, _, _) in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if right else c.ljust(w)
                         for c, w, (_, _, right) in zip(cells, widths, columns)).rstrip()

    out = describe(report) + ["", line([name for name, _, _ in columns])]
    out += [line(row) for row in rows]
    out += ["", totals_line(report)]
    return "\n".join(out) + "\n"


def sorted_rows(tensors: list[TensorStats], column: str, reverse: bool) -> list[tuple[int, TensorStats]]:
    """``(parameter index, tensor)`` sorted by ``column``: "#" is the parameter order,
    "tensor" the name, the others by value; a tensor without the value ("-") comes last
    either way."""
    rows = list(enumerate(tensors))
    if column == "#":
        return rows[::-1] if reverse else rows

    def value(t: TensorStats):
        if column == "tensor":
            return t.name
        return {"shape": t.count, "nonfinite": sum(t.nonfinite.values()), "dead_v": t.dead_v_frac}.get(
            column, getattr(t, column, None))

    present = sorted((r for r in rows if value(r[1]) is not None), key=lambda r: value(r[1]), reverse=reverse)
    return present + [r for r in rows if value(r[1]) is None]
