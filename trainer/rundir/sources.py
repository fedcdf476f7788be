"""Data sources of the arms: files, directories, globs and built-ins, resolved without torch.

``builtin:`` sources exist on every Python install, so the default run needs no
download: ``stdlib-code`` (the standard library's ``.py`` files), ``stdlib-docstrings``
(the docstrings in them) and ``pydoc-topics`` (the English help topics that ship in
``pydoc_data``). Relative paths are resolved against the run directory.
"""

from __future__ import annotations

import ast
import glob
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

BUILTIN_PREFIX = "builtin:"
BUILTINS = ("stdlib-code", "stdlib-docstrings", "pydoc-topics")
# Built-ins read at most this much text, from a fixed, sorted file list, so that a run
# is deterministic and starts quickly.
BUILTIN_BYTES = 4 << 20


class SourceError(ValueError):
    """A source that yields no data; the message says which and why."""


@dataclass(frozen=True)
class SourceCheck:
    """Whether a source can yield data, without reading it all."""

    ok: bool
    reason: str = ""


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files() -> list[Path]:
    root = _stdlib_dir()
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__")
    files = [p for p in root.rglob("*.py") if not any(part in skip for part in p.relative_to(root).parts)]
    return sorted(files)


def _pattern_files(spec: str, base_dir: Path) -> list[Path]:
    path = Path(os.path.expanduser(spec))
    if not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if any(ch in spec for ch in "*?["):
        return sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
    return [path] if path.exists() else []


def check_source(spec: str, base_dir: str | os.PathLike[str]) -> SourceCheck:
    """Quick look: does ``spec`` name something that yields text? (No full read.)"""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX):]
        if name not in BUILTINS:
            return SourceCheck(False, f"unknown built-in {spec!r}; known: {', '.join(BUILTIN_PREFIX + b for b in BUILTINS)}")
        return SourceCheck(True)
    files = _pattern_files(spec, Path(base_dir))
    if not files:
        return SourceCheck(False, f"source {spec!r} matches no file")
    for f in files:
        try:
            if f.stat().st_size > 0:
                return SourceCheck(True)
        except OSError:
            continue
    return SourceCheck(False, f"source {spec!r}: every matching file is empty or unreadable")


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 40:
                out.append(doc)
    return out


def _read_capped(chunks, cap: int) -> bytes:
    out, total = [], 0
    for chunk in chunks:
        out.append(chunk)
        total += len(chunk)
        if total >= cap:
            break
    return b"".join(out)[:cap]


def load_source(spec: str, base_dir: str | os.PathLike[str], max_bytes: int = BUILTIN_BYTES) -> bytes:
    """All the text of a source as bytes (files joined by blank lines); raises :class:`SourceError`."""
    check = check_source(spec, base_dir)
    if not check.ok:
        raise SourceError(check.reason)
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX):]
        if name == "stdlib-code":
            data = _read_capped((p.read_bytes() + b"\n\n" for p in _stdlib_files()), max_bytes)
        elif name == "stdlib-docstrings":
            data = _read_capped(("\n\n".join(_docstrings(p)).encode() + b"\n\n" for p in _stdlib_files()), max_bytes)
        else:
            from pydoc_data import topics  # the stdlib's help() text; plain data, no side effects
            data = _read_capped((topics.topics[k].encode() + b"\n\n" for k in sorted(topics.topics)), max_bytes)
    else:
        data = _read_capped((p.read_bytes() + b"\n\n" for p in _pattern_files(spec, Path(base_dir))
                             if p.is_file()), max_bytes)
    if not data.strip():
        raise SourceError(f"source {spec!r} yielded no text")
    return data
