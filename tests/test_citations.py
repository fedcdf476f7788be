"""Code cites the contract by its sections: ``docs/contract.md#`` then the anchor of one of
docs/contract.md's headings. The original design document is not in the repository, so a
citation of its sections ("DESIGN" ".md section N") would send a reader nowhere."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs import anchors

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"
CODE = ("rundir", "trainer", "console", "bench", "tests", "examples")
CITATION = re.compile(r"docs/contract\.md#([\w-]+)")
ABSENT = "DESIGN" + ".md"                   # spelled in two pieces: this file is code too


def code_files(root: Path = ROOT) -> list[Path]:
    return [p for package in CODE for p in sorted((root / package).rglob("*")) if p.suffix in (".py", ".c")]


def bad_citations(paths: list[Path], headings: frozenset[str], root: Path = ROOT) -> list[str]:
    bad = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(root)}:{number}"
            if ABSENT in line:
                bad.append(f"{where}: cites {ABSENT}, which the repository does not have")
            bad += [f"{where}: no heading #{anchor} in docs/contract.md" for anchor in CITATION.findall(line)
                    if anchor not in headings]
    return bad


def test_code_cites_the_contracts_sections():
    files = code_files()
    assert len(files) > 100
    assert sum("docs/contract.md#" in p.read_text(encoding="utf-8") for p in files) > 20      # they were found
    assert bad_citations(files, anchors(CONTRACT)) == []


def test_the_check_names_a_missing_section_and_the_absent_document(tmp_path):
    probe = tmp_path / "probe.py"           # not in the tree: the scan of the tree runs beside this
    cite = "docs/contract.md#"
    probe.write_text(f"# {ABSENT} section 4\n# {cite}retention and {cite}no-such-section\n")
    assert bad_citations([probe], anchors(CONTRACT), tmp_path) == [
        f"probe.py:1: cites {ABSENT}, which the repository does not have",
        "probe.py:2: no heading #no-such-section in docs/contract.md"]
