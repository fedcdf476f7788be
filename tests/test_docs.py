"""The documentation stays true to the code it describes.

- docs/contract.md lists, in its tables, exactly the file names and history events that
  rundir/layout.py defines: a name added to one and not the other fails here.
- Every relative link in README.md and docs/*.md reaches a file, and a heading of it where
  the link names an anchor.
- Every ``make TARGET`` they show is a target of the Makefile, every ``python -m MODULE`` a
  module that imports, and every ``--flag`` they show after ``andrea-console`` or
  ``andrea-train`` a flag that program's real ``--help`` lists.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from rundir import layout

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAMS = ("andrea-console", "andrea-train")

# How the contract writes each of layout.py's name patterns (a step, a UTC stamp, any suffix).
STEP_PLACEHOLDER, UTC_PLACEHOLDER = "NNNNNN", "<UTC>"
PATTERN_CONSTANTS = {"TMP_PREFIX", "CHECKPOINT_PREFIX", "CHECKPOINT_SUFFIX", "SIDECAR_SUFFIX",
                     "PIVOT_ARCHIVE_PREFIX", "ROLLBACK_ARCHIVE_PREFIX", "RANK_RECORD_PREFIX", "RANK_RECORD_SUFFIX",
                     "STACKS_ANSWER_PREFIX", "STACKS_ANSWER_SUFFIX"}
RANK_PLACEHOLDER = "NNNNN"
# String constants of layout.py that name no file: the signal label of a taken checkpoint request,
# the stop event's reasons.
NOT_FILE_NAMES = {"CHECKPOINT_REQUESTED", "STOP_ERROR", "STOP_NONFINITE", "STOP_REQUEUE"}


# -- reading markdown ------------------------------------------------------------------
FENCE = re.compile(r"^\s*(```|~~~)")
# A code span may wrap onto the next line of its paragraph, never past a blank line.
CODE_SPAN = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)\1", re.S)


def split_fences(text: str) -> tuple[list[str], list[list[str]]]:
    """The lines outside fenced code blocks (a fenced line kept as "" so that numbering
    holds), and the lines of each fenced block."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        if FENCE.match(line):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
            prose.append("")
        elif block is not None:
            block.append(line)
            prose.append("")
        else:
            prose.append(line)
    return prose, blocks


def table_rows(text: str) -> list[tuple[str, list[list[str]]]]:
    """Every table of ``text`` (outside fences) as (its first header cell, its body rows' cells)."""
    prose, _ = split_fences(text)
    tables, rows = [], None
    for line in prose + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if rows is None:
                rows = [cells]
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows is not None:
            tables.append((rows[0][0], rows[1:]))
            rows = None
    return tables


def code_spans(cell: str) -> list[str]:
    """The code spans of a table cell (``a``, ``b``: several names in one cell)."""
    return [m.group(2).strip() for m in CODE_SPAN.finditer(cell)]


def code_texts(text: str) -> list[str]:
    """The code of a document: each inline code span, and each command of a fenced block
    (a line and the indented lines that continue it)."""
    prose, blocks = split_fences(text)
    spans = [m.group(2).replace("\n", " ") for m in CODE_SPAN.finditer("\n".join(prose))]
    commands: list[str] = []
    for block in blocks:
        for line in block:
            if commands and line[:1].isspace() and line.strip() and not line.lstrip().startswith("#"):
                commands[-1] += " " + line.strip()
            else:
                commands.append(line)
    return spans + commands


# -- (a) the contract's names are layout.py's ----------------------------------------------
def layout_file_names() -> set[str]:
    """Every file name layout.py defines, as the contract writes it (patterns with placeholders)."""
    constants = {name: value for name, value in vars(layout).items()
                 if name.isupper() and isinstance(value, str)}
    patterns = {name for name in constants if name.endswith(("_PREFIX", "_SUFFIX"))}
    assert patterns == PATTERN_CONSTANTS, (
        f"layout.py's name patterns are {sorted(patterns)}: a new one needs its row in docs/contract.md's files "
        "table and its spelling here")
    plain = {value for name, value in constants.items()
             if name not in patterns and name not in NOT_FILE_NAMES and not name.startswith("EVENT_")
             and value not in layout.ALL_KINDS}
    checkpoint = layout.checkpoint_name(0).replace("000000", STEP_PLACEHOLDER)
    archives = {f(0, UTC_PLACEHOLDER).replace("000000", STEP_PLACEHOLDER)
                for f in (layout.pivot_archive_name, layout.rollback_archive_name)}
    ranks = {f(0).replace("00000", RANK_PLACEHOLDER) for f in (layout.rank_record_name, layout.stacks_answer_name)}
    return plain | {checkpoint, layout.sidecar_name(checkpoint), layout.TMP_PREFIX + "*"} | archives | ranks


def layout_event_names() -> set[str]:
    return {value for name, value in vars(layout).items() if name.startswith("EVENT_")}


def contract_table(header: str) -> set[str]:
    """The names in the first column of docs/contract.md's table whose first header is ``header``."""
    found = [rows for first, rows in table_rows(CONTRACT.read_text(encoding="utf-8")) if first == header]
    assert len(found) == 1, f"docs/contract.md should have one table headed {header!r}, has {len(found)}"
    names = {span.rstrip("/") for cells in found[0] for span in code_spans(cells[0])}
    assert names, f"the {header!r} table names nothing in code spans"
    return names


def test_the_contract_lists_every_file_name_layout_defines_and_no_other():
    contract, code = contract_table("name"), layout_file_names()
    assert not code - contract, f"defined in rundir/layout.py, missing from docs/contract.md: {sorted(code - contract)}"
    assert not contract - code, f"in docs/contract.md, not defined in rundir/layout.py: {sorted(contract - code)}"


def test_the_contract_lists_every_history_event_layout_defines_and_no_other():
    contract, code = contract_table("event"), layout_event_names()
    assert not code - contract, f"defined in rundir/layout.py, missing from docs/contract.md: {sorted(code - contract)}"
    assert not contract - code, f"in docs/contract.md, not defined in rundir/layout.py: {sorted(contract - code)}"


def test_the_table_reader_finds_names_in_a_table():
    """The parser the two tests above rely on: a name missing from a table is missed."""
    text = "| name | what |\n|---|---|\n| `a.json`, `b/` | x |\n| `c` | `not-a-name` |\n\nafter\n"
    [(first, rows)] = table_rows(text)
    assert first == "name"
    assert [code_spans(cells[0]) for cells in rows] == [["a.json", "b/"], ["c"]]


# -- (b) links ----------------------------------------------------------------------------
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (code and link markup dropped) lower-cased,
    everything but letters, digits, spaces, hyphens and underscores removed, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a markdown file (a repeated heading gets -1, -2, ...)."""
    prose, _ = split_fences(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for line in prose:
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def relative_links(path: Path) -> list[str]:
    """The targets of the links of a markdown file that point inside the repository."""
    return relative_links_of(path.read_text(encoding="utf-8"))


def relative_links_of(markdown: str) -> list[str]:
    prose, _ = split_fences(markdown)
    text = CODE_SPAN.sub("", "\n".join(prose))
    targets = LINK.findall(text) + re.findall(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)", text, re.M)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc):
    broken = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / unquote(file_part)).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_contract_is_linked_from_the_readme():
    assert "docs/contract.md" in relative_links(ROOT / "README.md")


def test_the_link_scan_finds_every_kind_of_link():
    assert relative_links_of("[a](x.md) ![b](img/y.png \"t\") [c](https://e.org) `[d](z.md)` [e](#h)\n\n"
                             "[f]: refs/f.md\n") \
        == ["x.md", "img/y.png", "#h", "refs/f.md"]


def test_slugs_are_githubs():
    assert slug("The resume contract: `step_NNNNNN.json`") == "the-resume-contract-step_nnnnnnjson"
    assert slug("The lock and the trainer's identity") == "the-lock-and-the-trainers-identity"
    assert slug("`.loss.json`: the history") == "lossjson-the-history"


# -- (c) commands ---------------------------------------------------------------------------
def makefile_targets() -> set[str]:
    targets = set()
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        match = re.match(r"([A-Za-z0-9_][A-Za-z0-9_.\-]*)\s*:(?!=)", line)
        if match:
            targets.add(match.group(1))
    return targets


def make_targets_named(code: str) -> list[str]:
    """The targets of every ``make ...`` command in a piece of code (variables and options skipped)."""
    targets = []
    for match in re.finditer(r"(?:^|(?<=[\s;&(]))make\b(?![-.\w/])", code):
        rest = re.split(r"\||#|;|&&|\)", code[match.end():], maxsplit=1)[0]
        try:
            words = shlex.split(rest)
        except ValueError:
            words = rest.split()
        targets += [w for w in words if not w.startswith("-") and not re.match(r"[A-Za-z_]\w*=", w)]
    return targets


def modules_named(code: str) -> list[str]:
    return re.findall(r"\bpython3?\s+-m\s+([A-Za-z_][\w.]*)", code)


def flags_named(code: str) -> list[tuple[str, str]]:
    """``(program, --flag)`` for every flag shown after ``andrea-console`` or ``andrea-train``."""
    found = []
    mentions = list(re.finditer(r"(?<![\w-])(andrea-console|andrea-train)(?![\w-])", code))
    for this, after in zip(mentions, mentions[1:] + [None]):
        rest = code[this.end():after.start() if after else len(code)]
        found += [(this.group(1), flag) for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest)]
    return found


@functools.cache
def help_flags(program: str) -> frozenset[str]:
    """The flags the installed entry point's ``--help`` lists."""
    executable = Path(sys.executable).parent / program
    assert executable.exists(), f"{executable}: the entry point is not installed beside this Python (make install)"
    result = subprocess.run([str(executable), "--help"], capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, f"{program} --help: exit {result.returncode}: {result.stderr[-500:]}"
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", result.stdout))


def all_code() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), code) for doc in DOCS
            for code in code_texts(doc.read_text(encoding="utf-8"))]


def test_every_make_target_shown_is_in_the_makefile():
    targets = makefile_targets()
    named = [(where, t) for where, code in all_code() for t in make_targets_named(code)]
    assert named, "no make command found: the scan is broken"
    missing = sorted({f"{where}: make {t}" for where, t in named if t not in targets})
    assert not missing, f"not targets of the Makefile ({sorted(targets)}): {missing}"


def test_every_python_module_shown_exists():
    named = {(where, module) for where, code in all_code() for module in modules_named(code)}
    assert named, "no python -m command found: the scan is broken"
    missing = sorted(f"{where}: python -m {module}" for where, module in named
                     if importlib.util.find_spec(module) is None)
    assert not missing, f"no such module: {missing}"


def test_every_flag_shown_is_in_the_programs_help():
    named = {(where, program, flag) for where, code in all_code() for program, flag in flags_named(code)}
    assert {program for _, program, _ in named} == set(PROGRAMS), "the scan found no flag of one program"
    missing = sorted(f"{where}: {program} {flag}" for where, program, flag in named
                     if flag not in help_flags(program))
    assert not missing, f"flags that --help does not list: {missing}"


def test_the_command_scans_find_what_they_should():
    assert make_targets_named('make TORCH_SPEC="torch --index-url https://x/y" demo') == ["demo"]
    assert make_targets_named("make demo | tee demo.log") == ["demo"]
    assert make_targets_named("make soak KILL9_KILLS=5 FUZZ_EXAMPLES=200") == ["soak"]
    assert make_targets_named("make") == [] and make_targets_named("cmake build") == []
    assert flags_named("andrea-console RUN --pivot [--cap ARM=X] then andrea-train R --prune") == [
        ("andrea-console", "--pivot"), ("andrea-console", "--cap"), ("andrea-train", "--prune")]
    assert flags_named("~/.cache/andrea-console") == []
    assert modules_named("python -m bench gpu; python3 -m trainer RUN") == ["bench", "trainer"]
