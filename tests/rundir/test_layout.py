"""The run directory's vocabulary is spelled once, in :mod:`rundir.layout`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rundir import layout

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "rundir", "trainer")

# What must never be spelled in code outside layout.py: a contract file name used as a
# name or path (a literal that is the name, or ends with "/name"), the temporary prefix,
# and the checkpoint-name pattern or format. Prose that mentions a file in a message or a
# docstring is not a spelling of its name.
NAMES = (layout.LOSS_JSON, layout.STATE_JSON, layout.SAMPLES_JSON, layout.TRAINER_JSON, layout.RUN_TOML,
         layout.TRAINER_LOG, layout.PIVOT_JOURNAL, layout.PIVOT_RECORD, layout.LOCK_FILE, layout.LOCK_OWNER_FILE,
         layout.LOCK_TAKEOVER_FILE,
         layout.ROLLBACK_JOURNAL, layout.ROLLBACK_RECORD)
FORBIDDEN = re.compile("|".join([r"(^|/)(" + "|".join(re.escape(n) for n in NAMES) + r")/?$",
                                 re.escape(layout.TMP_PREFIX), r"step_(\\d|\{|%|\(|\[)", r"^step_$",
                                 r"^pivot_$", r"^rollback_$", r"^archive/"]))


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


# The history's event names. Each is also a common word ("start", "stop"), so a literal is an
# event name's spelling only where it stands for an event: the name given to an ``event(...)``
# call (first argument or ``event=``), the value of an ``"event"`` key of a dict, or what an
# ``x.event`` or ``x["event"]`` is compared with.
EVENT_NAMES = frozenset(value for name, value in vars(layout).items() if name.startswith("EVENT_"))


def _is_event(node: ast.AST) -> bool:
    """``x.event``, ``x["event"]`` or ``event``: an expression that holds an event's name."""
    if isinstance(node, ast.Attribute):
        return node.attr == "event"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "event"
    return isinstance(node, ast.Name) and node.id == "event"


def _event_literals(node: ast.AST) -> list[ast.AST]:
    """The literals ``node`` uses as event names (see :data:`EVENT_NAMES`)."""
    if isinstance(node, ast.Call):
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        named = [k.value for k in node.keywords if k.arg == "event"]
        return (node.args[:1] if callee == "event" else []) + named
    if isinstance(node, ast.Dict):
        return [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "event"]
    if isinstance(node, ast.Compare) and any(_is_event(side) for side in (node.left, *node.comparators)):
        found: list[ast.AST] = []
        for side in (node.left, *node.comparators):
            found += side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        return found
    return []


def spelled_names(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: literal`` (the file relative to ``root``) for every string literal in ``path``
    that spells a contract name (an event's name: where it stands for an event)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if FORBIDDEN.search(node.value):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
        for literal in _event_literals(node):
            if isinstance(literal, ast.Constant) and literal.value in EVENT_NAMES:
                found.append(f"{path.relative_to(root)}:{literal.lineno}: event {literal.value!r}")
    return found


def test_no_contract_name_is_spelled_outside_the_vocabulary():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "rundir" / "layout.py":
                continue
            offenders += spelled_names(path)
    assert not offenders, "spell these through rundir.layout:\n" + "\n".join(offenders)


@pytest.mark.parametrize("literal", ['".loss.json"', '"step_%06d.bin" % 3', 'f"{d}/.tmp-x"', '"archive/pivot_1"',
                                     'f"{d}/run.toml"', 'r"^step_(\\d+)"', 'f"step_{n:06d}.bin"',
                                     'out.event("stop", 3, "stopping")', 'w.append(event="checkpoint_failed")',
                                     '{"event": "start", "step": 0}', 'e.event == "pivot"',
                                     'ev.event in ("start", "resume")', 'row["event"] != "eval"'])
def test_the_scan_finds_a_spelled_name(tmp_path, literal):
    module = tmp_path / "probe.py"            # not in the tree: the scan of the tree runs beside this
    module.write_text(f'"""doc: .loss.json is fine here."""\nX = {literal}\n')
    assert spelled_names(module, tmp_path), literal


def test_an_event_name_as_a_word_is_not_a_spelling(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text('x = {"start": 1, "stop": 2}\nif mode == "stop": pass\nlog.event(EVENT_STOP, 3)\n')
    assert spelled_names(module, tmp_path) == []


def test_names_round_trip():
    assert layout.checkpoint_name(42) == "step_000042.bin"
    assert layout.checkpoint_name(1_234_567) == "step_1234567.bin"
    assert layout.checkpoint_step(layout.checkpoint_name(7)) == 7
    assert layout.checkpoint_step("step_42.bin") is None          # fewer than six digits
    assert layout.sidecar_name("step_000042.bin") == "step_000042.json"
    assert layout.kind_of(layout.TMP_PREFIX + "x") is None
    assert layout.kind_of("step_000001.json") == layout.CHECKPOINTS
    assert layout.kind_of(layout.LOSS_JSON) == layout.HISTORY
    assert layout.kind_of("notes.txt") == layout.DIRECTORY
    assert not layout.is_known("notes.txt") and layout.is_known(layout.RUN_TOML)


def test_only_ascii_step_numbers_without_a_trailing_newline_name_a_checkpoint():
    assert layout.checkpoint_step("step_000100.bin\n") is None
    assert layout.checkpoint_step("step_\u0967\u0968\u0969\u096a\u096b\u096c.bin") is None   # Devanagari digits
