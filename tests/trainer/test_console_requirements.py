"""bench/console-requirements.txt: what a machine with its own torch installs with ``--no-deps``
for ``python -m bench gpu``. It must name every dependency of the console, and theirs."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.trainer.trainer_runs import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _listed() -> list[Requirement]:
    lines = (ROOT / "bench" / "console-requirements.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_it_starts_with_pyprojects_dependencies():
    project = tomllib.loads(Path(ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [str(r) for r in _listed()[:len(project)]] == [str(Requirement(d)) for d in project]


def test_it_names_every_dependency_of_theirs_here():
    """The closure over the installed distributions' metadata, extras included (textual needs
    markdown-it-py[linkify]), for this Python; torch is never in it."""
    environment = default_environment()
    listed = {canonicalize_name(r.name) for r in _listed()}
    seen: set[str] = set()
    todo = [(r.name, tuple(r.extras)) for r in _listed() if r.marker is None or r.marker.evaluate(environment)]
    while todo:
        name, extras = todo.pop()
        seen.add(canonicalize_name(name))
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            wanted = any(req.marker.evaluate({**environment, "extra": e}) for e in extras or ("",)) \
                if req.marker else True
            if wanted and canonicalize_name(req.name) not in seen:
                todo.append((req.name, tuple(req.extras)))
    assert "torch" not in seen
    assert seen - listed == set()
