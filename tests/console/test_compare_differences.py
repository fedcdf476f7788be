"""The comparison's table of what differs between the compared runs' run.toml and start
events: the pure function (console/model/run_diff.py), and the screen at 80x24 and 160x48."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.model.run_diff import ABSENT, DiffRow, flatten, run_diff, start_data
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens.compare import read_series
from rundir import HistoryEvent, RunConfig, load_run_config, write_run_config
from tests.console.conftest import fixed_now
from tests.console.test_overview_snapshots import compared as compare_marked
from tests.rundirs import make_run

START = {"event": "start", "step": 0, "time": 1.0, "pid": 4242, "preset": "micro", "seed": 7,
         "torch_version": "2.13.0", "device": "cpu", "arms": ["stdlib-code", "pydoc-topics"]}


def config(**changes) -> dict:
    c = RunConfig.from_preset("micro")
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        setattr(getattr(c, section), key, value)
    return c.to_dict()


# -- run_diff -----------------------------------------------------------------------------


def test_only_the_keys_that_differ_flattened_and_in_order():
    a = config(run__seed=7)
    b = config(run__seed=8, optimizer__lr=1e-3)
    b["arms"]["stdlib-code"]["cap"] = 0.5
    rows = run_diff([(a, START), (b, {**START, "torch_version": "2.12.0", "pid": 1, "time": 9.0})])
    assert rows == [DiffRow("run.seed", ("7", "8")), DiffRow("optimizer.lr", ("0.003", "0.001")),
                    DiffRow("arms.stdlib-code.cap", ("0.8", "0.5")),
                    DiffRow("start.torch_version", ("2.13.0", "2.12.0"))]


def test_the_same_runs_have_no_rows_and_bookkeeping_is_never_a_difference():
    assert run_diff([(config(), START), (config(), {**START, "pid": 99, "time": 5.0, "step": 3})]) == []
    assert run_diff([(config(), START)]) == []            # one run: nothing to compare with


def test_a_run_without_a_source_shows_absent_and_does_not_make_every_key_differ():
    rows = run_diff([(config(), START), (config(optimizer__lr=0.01), None), (None, START)])
    assert rows == [DiffRow("run.toml", ("present", "present", ABSENT)),
                    DiffRow("optimizer.lr", ("0.003", "0.01", ABSENT)),
                    DiffRow("start event", ("present", ABSENT, "present"))]


def test_a_key_only_some_runs_have_and_values_of_another_type_differ():
    rows = run_diff([(None, {"a": 1, "b": [1, 2], "c": True}), (None, {"a": 1.0, "b": [1, 2], "d": {}})])
    assert rows == [DiffRow("start.a", ("1", "1")), DiffRow("start.c", ("true", ABSENT))]    # {} sets nothing


def test_flatten_and_the_start_event_taken():
    assert flatten({"a": {"b": {"c": 1}, "d": []}, "e": {}}) == {"a.b.c": 1, "a.d": []}
    events = [HistoryEvent("resume", 5, None, 3, {"x": 1}), HistoryEvent("start", 0, None, 1, {"x": 0}),
              HistoryEvent("resume", 9, None, 9, {"x": 2})]
    assert start_data(events) == {"x": 0}
    assert start_data([events[0], events[2]]) == {"x": 2} and start_data([]) is None


def test_overrides_are_the_run_s_settings_and_no_setting_is_two_rows():
    plain = {**START, "overrides": {}, "max_steps": 0}
    flagged = {**START, "overrides": {"max_steps": 600}, "max_steps": 600}
    rows = run_diff([(config(), plain), (config(), flagged)])
    assert rows == [DiffRow("run.max_steps", ("0", "600"))]


def test_an_unset_eval_every_reads_as_the_checkpoint_cadence_it_follows(tmp_path):
    root = tmp_path / "runs"
    for name, every in (("default", None), ("every-50", 50)):
        run = make_run(root / name, steps=100, checkpoints=())
        c = load_run_config(run)
        c.run.eval_every, c.run.name = every, "run"
        write_run_config(run, c)
    ready = read_series([(name, root / name) for name in ("default", "every-50")])
    every = c.run.checkpoint_every
    assert DiffRow("run.eval_every", (str(every), "50")) in ready.differences


def test_a_hostile_start_event_is_bounded():
    huge = {f"k{i}": i for i in range(10_000)}
    assert len(run_diff([(None, huge), (None, {})])) == 500


# -- the screen ---------------------------------------------------------------------------


def runs_dir(tmp_path: Path) -> Path:
    """Three runs that differ in their settings, and another engine's run (no run.toml)."""
    root = tmp_path / "runs"
    settings = {"baseline": {}, "lower-lr": {"optimizer__lr": 1e-3, "run__seed": 11},
                "capped": {"run__preset": "tiny"}}
    for i, (name, changes) in enumerate(settings.items()):
        run = make_run(root / name, steps=1200, checkpoints=(600, 1200), seed=i)
        c = load_run_config(run)
        for dotted, value in changes.items():
            section, key = dotted.split("__")
            setattr(getattr(c, section), key, value)
        if name == "capped":
            c.arms["stdlib-code"].cap = 0.5
        c.run.name = "run"                               # the directory's name differs anyway
        write_run_config(run, c)
        # The trainer's start event, as it writes it (the generated one has no fields).
        history = run / ".loss.json"
        lines = history.read_text().splitlines()
        start = {**START, "preset": c.run.preset, "seed": c.run.seed,
                 "torch_version": "2.12.0" if name == "capped" else "2.13.0"}
        history.write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")
    make_run(root / "other-engine", steps=900, checkpoints=(), history_format="array", with_run_toml=False,
             with_state=False, with_samples=False, seed=4)
    return root


def test_read_series_gives_the_differences(tmp_path):
    root = runs_dir(tmp_path)
    ready = read_series([(name, root / name) for name in ("baseline", "lower-lr", "capped", "other-engine")])
    keys = [row.key for row in ready.differences]
    assert keys[:2] == ["run.toml", "run.preset"]
    # Another engine's run (no run.toml) has a start event: the start events' seeds are kept.
    assert {"optimizer.lr", "run.seed", "arms.stdlib-code.cap", "start.torch_version", "start.seed"} <= set(keys)
    ours = read_series([(name, root / name) for name in ("baseline", "lower-lr", "capped")])
    keys = [row.key for row in ours.differences]
    assert "start.seed" not in keys and "start.preset" not in keys          # run.toml's rows say them
    assert {"run.seed", "run.preset", "start.torch_version"} <= set(keys)
    lr = next(row for row in ready.differences if row.key == "optimizer.lr")
    assert lr.values == ("0.003", "0.001", "0.003", ABSENT)


def app_for(root: Path) -> ConsoleApp:
    return ConsoleApp(root, ConsoleOptions(now=fixed_now, watch=False, tick=None, free_space=lambda _: 500 << 30))


async def compared(pilot) -> None:
    await compare_marked(pilot, ("baseline", "lower-lr", "capped"))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_comparison_with_its_table_of_differences(snap_compare, tmp_path, size):
    assert snap_compare(app_for(runs_dir(tmp_path)), terminal_size=size, run_before=compared)
