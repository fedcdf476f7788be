"""Nothing decides by a message's wording: findings, notices, alerts and outcomes are typed
records whose text is made at the edge. This test reads the source of the console, the
run-directory library and the trainer and fails on a decision taken by searching a text:
``"word" in something_text`` (or ``why``, ``reason``, ``message``, ``error``, ``label``,
``state``...) and ``something_text.startswith(...)``. The few string tests that are not on
a message (a device name, a JSON line, a dict's key) are listed with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "rundir", "trainer")
# Names that hold words for people, not data.
WORDY = ("text", "message", "msg", "why", "reason", "error", "err", "label", "state", "detail", "summary", "title",
         "notice", "what", "line", "problem", "alert")
ALLOWED = {
    ("rundir/config.py", "str(self.device).startswith('cuda:')"),       # a torch device's name, not a message
    ("rundir/history/records.py", "'\\\\u' in text"),                   # a JSON line: escapes decide the decoder
    ("trainer/data.py", "'order' in state"),                            # a key of a state dict
    ("trainer/data.py", "'held_out' in state"),                         # a key of a state dict
    ("rundir/identity.py", "line.startswith('lock:')"),                 # a field of /proc/PID/fdinfo
    ("rundir/layout.py", "reason.startswith(STOP_ERROR)"),              # the stop event's reason as the contract
                                                                        # spells it
}


def _wordy(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str":
        return True
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return bool(name) and any(name == w or name.endswith(w) for w in WORDY)


def text_decisions(source: str) -> list[str]:
    """Each expression in ``source`` that tests a text by the words in it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(map(_wordy, node.comparators)):
                found.append(ast.unparse(node))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and _wordy(node.func.value)):
            found.append(ast.unparse(node))
    return found


def test_the_scan_finds_what_it_looks_for():
    assert text_decisions('if "within" in why: pass') == ["'within' in why"]
    assert text_decisions("ok = snap.dir_state.startswith('unreadable')") == ["snap.dir_state.startswith('unreadable')"]
    assert text_decisions("if 'zombie' not in notice.text: pass") == ["'zombie' not in notice.text"]
    assert text_decisions("if kind in KINDS and name.startswith('step_'): pass") == []


def test_no_decision_is_taken_by_a_messages_wording():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += [(rel, expr) for expr in text_decisions(path.read_text()) if (rel, expr) not in ALLOWED]
    assert found == [], "decisions taken by a text's words:\n" + "\n".join(f"{p}: {e}" for p, e in found)
