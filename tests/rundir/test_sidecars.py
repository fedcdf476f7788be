""".state.json, .samples.json and zombie arms."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rundir import find_zombies, load_run_config, newest_per_arm, read_samples, read_state
from rundir.sources import SourceError, check_source, load_source


def test_state_round_trip(run_dir):
    got = read_state(run_dir)
    assert got.ok and set(got.value.arms) == {"stdlib-code", "stdlib-docstrings", "pydoc-topics"}
    assert got.value.caps["stdlib-code"] == 0.8 and got.value.floors["pydoc-topics"] == 0.1
    assert got.value.arms["stdlib-code"].pulls == 100


@pytest.mark.parametrize("content, message", [
    (None, "not written yet"),
    (b"", "empty file"),
    (b'{"arms": {"a": ', "not valid JSON"),
    (b"[1, 2]", "top level is list"),
    (b'{"version": 1}', 'no "arms" object'),
    (b'{"arms": {"a": 3}}', "arm 'a' is not an object"),
])
def test_bad_state_files_give_an_error_value(tmp_path, content, message):
    if content is not None:
        (tmp_path / ".state.json").write_bytes(content)
    got = read_state(tmp_path)
    assert not got.ok and got.value is None and message in got.error


def test_state_with_odd_values_is_read_tolerantly(tmp_path):
    (tmp_path / ".state.json").write_bytes(b'{"arms": {"a": {"pulls": "many", "ema_reward": null, "x": 1}},'
                                           b' "policy": 5, "phase": []}')
    got = read_state(tmp_path)
    assert got.ok and got.value.arms["a"].pulls == 0 and math.isnan(got.value.arms["a"].ema_reward)
    assert got.value.arms["a"].extra == {"x": 1} and got.value.caps == {} and got.value.phase == {}


def test_samples_newest_per_arm(run_dir):
    got = read_samples(run_dir)
    assert got.ok
    newest = newest_per_arm(got.value)
    assert {s.step for s in newest.values()} == {300}


sample_items = st.lists(st.one_of(
    st.builds(lambda key, text, **rest: {key: text, **rest}, st.sampled_from(["completion", "text", "output"]),
              st.sampled_from(["x", "def f(x"]), step=st.integers(0, 9),
              arm=st.sampled_from(["a", "b", "c", "", None]), prompt=st.sampled_from(["", "def f("])),
    st.integers(), st.fixed_dictionaries({"step": st.integers()})), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=sample_items)
def test_the_newest_samples_alone_are_the_newest_of_all(tmp_path, items):
    """``newest_only`` (what the console reads) gives what :func:`newest_per_arm` makes of every
    sample, in the same order, with the same malformed samples counted."""
    (tmp_path / ".samples.json").write_text(json.dumps({"samples": items}))
    every, newest = read_samples(tmp_path), read_samples(tmp_path, newest_only=True)
    assert newest.value == list(newest_per_arm(every.value).values()) and newest.error == every.error


def test_samples_bare_list_and_malformed_entries(tmp_path):
    (tmp_path / ".samples.json").write_bytes(b'[{"step": 1, "arm": "a", "completion": "x"}, 7, {"step": 2}]')
    got = read_samples(tmp_path)
    assert [s.completion for s in got.value] == ["x"] and "2 malformed samples skipped" in got.error


def test_zombie_not_in_run_toml(make_run_dir):
    run = make_run_dir(state_arms=("stdlib-code", "repo-docstrings"))
    zombies = find_zombies(read_state(run).value, load_run_config(run), run)
    assert zombies == {"repo-docstrings": "not in run.toml"}


def test_zombie_without_run_toml_checks_recorded_sources(make_run_dir):
    run = make_run_dir(with_run_toml=False, state_arms=("stdlib-code", "gone"))
    zombies = find_zombies(read_state(run).value, None, run)
    assert list(zombies) == ["gone"] and "matches no file" in zombies["gone"]
    (run / "data").mkdir()
    (run / "data" / "gone.txt").write_text("text is back")
    assert find_zombies(read_state(run).value, None, run) == {}


def test_zombie_listed_in_run_toml_whose_files_are_empty(make_run_dir, tmp_path):
    run = make_run_dir()
    text = (run / "run.toml").read_text().replace('"builtin:pydoc-topics"', '"corpus/*.txt"')
    (run / "run.toml").write_text(text)
    (run / "corpus").mkdir()
    (run / "corpus" / "a.txt").write_text("")
    zombies = find_zombies(read_state(run).value, load_run_config(run), run)
    assert "every matching file is empty" in zombies["pydoc-topics"]


def test_sources_builtins_and_files(tmp_path):
    for name in ("stdlib-code", "stdlib-docstrings", "pydoc-topics"):
        data = load_source(f"builtin:{name}", tmp_path, max_bytes=50_000)
        assert len(data) == 50_000
    assert not check_source("builtin:nope", tmp_path).ok
    (tmp_path / "a.txt").write_text("hello world")
    assert load_source("a.txt", tmp_path).startswith(b"hello world")
    assert load_source(str(tmp_path), tmp_path).startswith(b"hello world")
    with pytest.raises(SourceError, match="matches no file"):
        load_source("missing/*.txt", tmp_path)
