"""Hostile run directories at the library's level: arm sources that cannot be checked,
sources that are huge directories, a run.toml built to make its parser crawl, an
oversized samples file. Each is answered with a reason, quickly, never an exception."""

from __future__ import annotations

import os

import pytest

from rundir import ConfigError, find_zombies, load_run_config, read_samples, read_state, write_state
from rundir.config import MAX_KEY_PARTS
from rundir.safe_read import RUN_TOML_MAX, SAMPLES_MAX
from rundir.sources import SourceCache, check_source
from tests.rundirs import make_run

TOO_LONG = "x" * 300          # a file name longer than NAME_MAX: stat fails with ENAMETOOLONG, even as root


def state_with_sources(run, sources: dict[str, str]) -> None:
    write_state(run, {"version": 1, "step": 1, "policy": {"caps": {}, "floors": {}},
                      "arms": {name: {"pulls": 1, "source": source} for name, source in sources.items()},
                      "phase": {}})


def test_a_source_that_cannot_be_checked_is_a_reason_not_an_exception(tmp_path):
    (tmp_path / "data").mkdir()
    for spec in (TOO_LONG, "data/\x00nul", f"data/{TOO_LONG}"):
        check = check_source(spec, tmp_path)
        assert not check.ok and "cannot be checked" in check.reason
        assert SourceCache().check(spec, tmp_path).reason == check.reason


def test_one_erroring_source_hides_no_other_zombie(tmp_path):
    run = make_run(tmp_path / "run", with_run_toml=False)
    (run / "data").mkdir()
    (run / "data" / "real.txt").write_text("text")
    state_with_sources(run, {"good": "data/real.txt", "gone": "data/gone.txt", "bad": TOO_LONG,
                             "builtin": "builtin:pydoc-topics"})
    state = read_state(run).value
    for cache in (None, SourceCache()):
        zombies = find_zombies(state, None, run, cache)
        assert set(zombies) == {"gone", "bad"}
        assert "matches no file" in zombies["gone"]
        assert "cannot be checked" in zombies["bad"] and "too long" in zombies["bad"].lower()


def test_a_directory_source_is_found_by_its_first_file_and_not_walked_again(tmp_path):
    corpus = tmp_path / "corpus"
    for sub in range(20):
        (corpus / f"d{sub:02d}").mkdir(parents=True)
        for i in range(50):
            (corpus / f"d{sub:02d}" / f"{i:03d}.txt").write_text("text")
    check = check_source("corpus", tmp_path)
    assert check.ok and check.witness is not None and check.witness.is_file()

    cache = SourceCache()
    for _ in range(5):
        assert cache.check("corpus", tmp_path).ok
    assert cache.searches == 1                  # re-checked by a stat of the file that proved it
    check.witness.unlink()
    assert cache.check("corpus", tmp_path).ok and cache.searches == 2


def test_an_unusable_directory_source_is_searched_again_only_when_it_changes(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(500):
        (corpus / f"{i:03d}.txt").touch()       # every file empty: a whole walk finds nothing
    clock = [0.0]
    cache = SourceCache(ttl=30.0, clock=lambda: clock[0])
    first = cache.check("corpus", tmp_path)
    assert not first.ok and "every matching file is empty" in first.reason
    for _ in range(5):
        assert cache.check("corpus", tmp_path) == first
    assert cache.searches == 1
    (corpus / "new.txt").write_text("text")     # a new entry changes the directory's stat
    assert cache.check("corpus", tmp_path).ok and cache.searches == 2
    (corpus / "new.txt").unlink()
    assert not cache.check("corpus", tmp_path).ok and cache.searches == 3
    (corpus / "000.txt").write_text("text")     # in place: the directory's stat stays...
    assert not cache.check("corpus", tmp_path).ok and cache.searches == 3
    clock[0] += 31.0                            # ...until the answer is older than the ttl
    assert cache.check("corpus", tmp_path).ok and cache.searches == 4


def test_zombie_check_without_run_toml_matches_the_uncached_check(tmp_path):
    run = make_run(tmp_path / "run", with_run_toml=False)
    (run / "data").mkdir()
    (run / "data" / "one.txt").write_text("text")
    (run / "data" / "empty.txt").touch()
    (run / "glob").mkdir()
    (run / "glob" / "a.txt").write_text("text")
    sources = {f"gone-{i}": f"gone-dir/{i}.txt" for i in range(200)}
    sources.update({"one": "data/one.txt", "empty": "data/empty.txt", "glob": "glob/*.txt", "noglob": "nope/*.txt",
                    "abs": str(run / "data" / "one.txt"), "dir": "data"})
    state_with_sources(run, sources)
    state = read_state(run).value
    cached = find_zombies(state, None, run, SourceCache())
    assert cached == find_zombies(state, None, run)
    assert set(cached) == {f"gone-{i}" for i in range(200)} | {"empty", "noglob"}


def test_a_run_toml_with_a_huge_dotted_key_is_refused_before_parsing(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / "run.toml", "a") as fh:
        fh.write("\n" + ".".join(["a"] * 100_000) + " = 1\n")
    assert (run / "run.toml").stat().st_size < RUN_TOML_MAX
    with pytest.raises(ConfigError, match=f"a dotted key of more than {MAX_KEY_PARTS} parts is not allowed"):
        load_run_config(run)


@pytest.mark.parametrize("extra", [
    "[" + ".".join(["t"] * 40) + "]",                           # a table header
    "x = {" + " . ".join(['"q"'] * 40) + " = 1}",               # quoted parts, spaces, in an inline table
])
def test_long_dotted_keys_in_every_place_are_refused(tmp_path, extra):
    run = make_run(tmp_path / "run")
    with open(run / "run.toml", "a") as fh:
        fh.write("\n" + extra + "\n")
    with pytest.raises(ConfigError, match="dotted key"):
        load_run_config(run)


def test_dots_inside_strings_and_dotted_arm_names_are_not_keys(tmp_path):
    run = make_run(tmp_path / "run")
    text = (run / "run.toml").read_text()
    text = text.replace('launch = []', 'launch = ["andrea-train", "--tag", "' + ".".join("v" * 40) + '"]')
    text = text.replace("[arms.pydoc-topics]", '[arms."pydoc.topics.v2"]')
    (run / "run.toml").write_text(text)
    config = load_run_config(run)
    assert "pydoc.topics.v2" in config.arms and len(config.run.launch[2]) == 79


def test_a_deeply_nested_run_toml_is_a_config_error(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / "run.toml", "a") as fh:
        fh.write("\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_run_config(run)


def test_run_toml_and_samples_over_their_caps_are_not_read(tmp_path):
    run = make_run(tmp_path / "run")
    os.truncate(run / "run.toml", RUN_TOML_MAX + 1)             # sparse: costs no disk
    with pytest.raises(ConfigError, match="larger than"):
        load_run_config(run)
    os.truncate(run / ".samples.json", SAMPLES_MAX + 1)
    got = read_samples(run)
    assert not got.ok and "larger than" in got.error


def test_a_fifo_named_like_a_checkpoint_is_invalid_and_does_not_block(tmp_path):
    from rundir import list_checkpoints

    run = make_run(tmp_path / "run", checkpoints=(100,))
    os.mkfifo(run / "step_000200.bin")          # an open() without O_NONBLOCK would wait for a writer forever
    infos = {c.step: c for c in list_checkpoints(run)}
    assert infos[100].status == "complete"
    assert infos[200].status == "invalid" and "FIFO" in infos[200].reason
