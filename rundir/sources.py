"""Data sources of the arms: files, directories, globs and built-ins, resolved without torch.

``builtin:`` sources exist on every Python install, so the default run needs no
download: ``stdlib-code`` (the standard library's ``.py`` files), ``stdlib-docstrings``
(the docstrings in them) and ``pydoc-topics`` (the English help topics that ship in
``pydoc_data``). Relative paths are resolved against the run directory.

:func:`check_source` stops at the first non-empty file and never raises (a source that
cannot even be looked at is its own reason); :class:`SourceCache` remembers its answers
for callers that ask again and again (the console, at every ``.state.json`` change).
"""

from __future__ import annotations

import functools
import glob
import inspect
import os
import re
import stat
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable, Iterable

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
    witness: Path | None = field(default=None, compare=False)    # the non-empty file that proved it


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> list[Path]:
    root = _stdlib_dir()
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__")
    files: list[Path] = []
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


def _resolve(spec: str, base_dir: str) -> str:
    # Strings, not Paths: the console checks 100,000 arms' sources when a state has them.
    path = os.path.expanduser(spec)
    return path if os.path.isabs(path) else os.path.join(base_dir, path)


_MAGIC = re.compile(r"[*?[]")


def _is_pattern(spec: str) -> bool:
    return _MAGIC.search(spec) is not None


def _stat(path: str) -> os.stat_result | None:
    """``os.stat``, None when nothing is there; other errors (no permission, a name too
    long, a loop of links) raise."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _nonempty_file(path: Path | str) -> bool:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0


def _search_dir(root: Path) -> tuple[Path | None, bool]:
    """The first non-empty file under ``root`` that :func:`load_source` would read (not
    hidden, not through a linked directory), and whether it found any such file at all.
    Lazy: it stops at the first one, so a directory of a hundred thousand files costs one
    entry when they hold text. An unreadable subdirectory is skipped, as ``rglob`` does."""
    stack, seen = [root], False
    while stack:
        directory = stack.pop()
        try:
            it = os.scandir(directory)
        except OSError:
            if directory is root:
                raise
            continue
        with it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif not entry.name.startswith(".") and entry.is_file():
                        seen = True
                        if entry.stat().st_size > 0:
                            return Path(entry.path), True
                except OSError:
                    continue
    return None, seen


def _search(spec: str, path: str, st: os.stat_result | None) -> tuple[Path | None, bool]:
    """The first non-empty file ``spec`` (resolved to ``path``, whose stat is ``st``) yields
    (None: none), and whether it yields any file at all."""
    if st is not None and stat.S_ISDIR(st.st_mode):
        return _search_dir(Path(path))
    if _is_pattern(spec):
        seen = False
        for name in glob.iglob(path, recursive=True):
            if os.path.isfile(name):
                seen = True
                if _nonempty_file(name):
                    return Path(name), True
        return None, seen
    if st is None:
        return None, False
    return (Path(path) if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None), True


def _verdict(spec: str, witness: Path | None, seen: bool) -> SourceCheck:
    if witness is not None:
        return SourceCheck(True, witness=witness)
    if not seen:
        return SourceCheck(False, f"source {spec!r} matches no file")
    return SourceCheck(False, f"source {spec!r}: every matching file is empty or unreadable")


def _unchecked(spec: str, err: Exception) -> SourceCheck:
    why = (err.strerror or str(err)) if isinstance(err, OSError) else str(err)
    return SourceCheck(False, f"source {spec!r} cannot be checked: {why}")


def check_source(spec: str, base_dir: str | os.PathLike[str]) -> SourceCheck:
    """Quick look: does ``spec`` name something that yields text? No full read and no full
    listing (it stops at the first non-empty file); never raises: a source that cannot be
    looked at (no permission, a name too long) is not ok, and the reason says why."""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX):]
        if name not in BUILTINS:
            known = ", ".join(BUILTIN_PREFIX + b for b in BUILTINS)
            return SourceCheck(False, f"unknown built-in {spec!r}; known: {known}")
        return SourceCheck(True)
    try:
        path = _resolve(spec, os.fspath(base_dir))
        witness, seen = _search(spec, path, _stat(path))
    except (OSError, ValueError) as err:      # ValueError: a NUL byte in the path
        return _unchecked(spec, err)
    return _verdict(spec, witness, seen)


# How long an unusable directory or glob source is believed while the stat of its
# directory stays the same (a file deeper down can change without touching it).
NEGATIVE_TTL_S = 30.0
CACHE_MAX_ENTRIES = 10_000


def _stamp(spec: str, path: str) -> Hashable:
    """What must stay the same for an earlier answer about ``spec`` to stand: the stat of
    its path, or of the directory a glob starts from."""
    if _is_pattern(spec):
        parts = Path(path).parts
        fixed = next((i for i, part in enumerate(parts) if _is_pattern(part)), len(parts))
        path = str(Path(*parts[:fixed])) if fixed else "."
    try:
        st = os.stat(path)
    except (OSError, ValueError) as err:
        return ("error", getattr(err, "errno", None))
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


class SourceCache:
    """:func:`check_source`, remembered, for a caller that re-checks the same sources at
    every ``.state.json`` change (the console). A single file is simply stat'ed again
    (that is the check). A directory or glob found usable is re-checked by one stat of the
    file that proved it; one found unusable is searched again when its directory's stat
    changes, or after ``ttl`` seconds. Not thread-safe: one reader uses one cache.

    Within one pass over the arms (:meth:`begin_pass`), a missing directory is looked up
    once: the files of 100,000 arms that all lie in a deleted ``data/`` cost one stat."""

    def __init__(self, ttl: float = NEGATIVE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self.searches = 0                   # full searches done (for tests and benchmarks)
        self._entries: dict[tuple[str, str], tuple[Hashable, float, SourceCheck]] = {}
        self._dirs: dict[tuple[str, str], bool] = {}    # this pass: is this directory absent?

    def begin_pass(self) -> None:
        """A new look at the sources: forget which directories were there."""
        self._dirs = {}

    def _dir_absent(self, spec: str, base: str) -> bool:
        """Whether the directory that would hold ``spec`` (not a pattern) is absent, looked
        up once per pass: then nothing under it exists either."""
        key = (spec.rpartition("/")[0], base)
        absent = self._dirs.get(key)
        if absent is None:
            try:
                absent = _stat(_resolve(key[0] or ".", base)) is None
            except (OSError, ValueError):
                absent = False              # let the file's own check say why
            self._dirs[key] = absent
        return absent

    def check(self, spec: str, base_dir: str | os.PathLike[str]) -> SourceCheck:
        if spec.startswith(BUILTIN_PREFIX):
            return check_source(spec, base_dir)
        base = os.fspath(base_dir)
        try:
            if not _is_pattern(spec) and self._dir_absent(spec, base):
                return _verdict(spec, None, False)
            path = _resolve(spec, base)
            st = _stat(path)
            if not _is_pattern(spec) and not (st is not None and stat.S_ISDIR(st.st_mode)):
                return _verdict(spec, *_search(spec, path, st))   # one file: its stat was the check
        except (OSError, ValueError) as err:
            return _unchecked(spec, err)                # says why, without remembering it
        key = (spec, base)
        hit = self._entries.get(key)
        if hit is not None:
            stamp, at, result = hit
            if result.ok and result.witness is not None and _nonempty_file(result.witness):
                return result
            if not result.ok and self.clock() - at < self.ttl and _stamp(spec, path) == stamp:
                return result
        stamp = _stamp(spec, path)
        result = check_source(spec, base)
        self.searches += 1
        if len(self._entries) >= CACHE_MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = (stamp, self.clock(), result)
        return result


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


def _read_capped(chunks: Iterable[bytes], cap: int) -> bytes:
    out: list[bytes] = []
    total = 0
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
