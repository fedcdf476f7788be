"""Data sources of the arms: files, directories, globs and built-ins, resolved without torch.

``builtin:`` sources exist on every Python install, so the default run needs no
download: ``stdlib-code`` (the standard library's ``.py`` files), ``stdlib-docstrings``
(the docstrings in them) and ``pydoc-topics`` (the English help topics that ship in
``pydoc_data``). Relative paths are resolved against the run directory.
"""

from __future__ import annotations

import functools
import glob
import inspect
import os
import re
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


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> list[Path]:
    root = _stdlib_dir()
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__")
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        files.extend(Path(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
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


# A docstring is a triple-quoted string that opens a statement on its own line. A regular
# expression finds them some fifty times faster than parsing every module with ``ast``,
# which matters because the trainer loads the built-ins at every start.
_DOCSTRING = re.compile(rb'^[ \t]*[rRuU]?("""|\'\'\')(.{40,}?)\1', re.MULTILINE | re.DOTALL)


def _docstrings(path: Path) -> list[bytes]:
    try:
        text = path.read_bytes()
    except OSError:
        return []
    return [inspect.cleandoc(m.group(2).decode("utf-8", "replace")).encode() for m in _DOCSTRING.finditer(text)]


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
            data = _read_capped((b"\n\n".join(_docstrings(p)) + b"\n\n" for p in _stdlib_files()), max_bytes)
        else:
            from pydoc_data import topics  # the stdlib's help() text; plain data, no side effects
            data = _read_capped((topics.topics[k].encode() + b"\n\n" for k in sorted(topics.topics)), max_bytes)
    else:
        data = _read_capped((p.read_bytes() + b"\n\n" for p in _pattern_files(spec, Path(base_dir))
                             if p.is_file()), max_bytes)
    if not data.strip():
        raise SourceError(f"source {spec!r} yielded no text")
    return data
