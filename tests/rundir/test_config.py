"""run.toml: presets, round trips, and errors that name key, value and rule."""

from __future__ import annotations

import pytest

from rundir import ConfigError, RunConfig, load_run_config, write_run_config
from rundir.config import PRESETS


def test_presets_have_the_sizes_the_project_promises():
    sizes = {name: RunConfig.from_preset(name).model.n_params() for name in PRESETS}
    assert 40_000 <= sizes["micro"] <= 60_000
    assert abs(sizes["tiny"] - 840_000) / 840_000 < 0.01
    assert abs(sizes["andrea-12m"] - 12_800_000) / 12_800_000 < 0.02
    assert abs(sizes["andrea-120m"] - 120_000_000) / 120_000_000 < 0.03


def test_round_trip(tmp_path):
    config = RunConfig.from_preset("tiny", max_steps=500)
    write_run_config(tmp_path, config)
    assert load_run_config(tmp_path) == config


@pytest.mark.parametrize("edit, message", [
    (("[model]\nn_layer = 4", "[model]\nn_layer = 0"), "model.n_layer = 0 is not allowed: expected an integer >= 1"),
    (("n_head = 4", "n_head = 3"), "model.n_head = 3 is not allowed: must divide model.n_embd = 128"),
    (("lr = 0.003", "lr = -1.0"), "optimizer.lr = -1.0 is not allowed"),
    (("lr = 0.003", 'lr = "fast"'), "optimizer.lr = 'fast' is not allowed: expected a finite number"),
    (("preset = \"tiny\"", "preset = \"huge\""), "run.preset = 'huge' is not allowed: one of micro, tiny"),
    (("[model]", "[model]\nn_layers = 2"), "unknown key model.n_layers; allowed:"),
    (("[model]", "[modle]\n[model]"), "unknown section [modle]"),
    (("cap = 0.8\nfloor = 0.1\n\n[arms.stdlib-docstrings]", "cap = 0.05\nfloor = 0.1\n\n[arms.stdlib-docstrings]"),
     "arms.stdlib-code.floor = 0.1 is not allowed: <= cap = 0.05"),
    (("cap = 0.8\nfloor = 0.1\n\n[arms.stdlib-docstrings]", "cap = 1.5\nfloor = 0.1\n\n[arms.stdlib-docstrings]"),
     "arms.stdlib-code.cap = 1.5 is not allowed: expected a number <= 1.0"),
    (("floor = 0.1", "floor = 0.5"), "the floors of [arms] sum to"),
    (("[run]", "[run"), "not valid TOML"),
    (("window = 100", "window = 3"), "alerts.window = 3 is not allowed: expected an integer >= 8"),
    (("k = 10.0", "k = 0"), "alerts.k = 0 is not allowed: expected a number > 0.0"),
    (("k = 10.0", "k = nan"), "alerts.k = nan is not allowed: expected a finite number"),
    (("rollback_margin = 100", "rollback_margin = -1"),
     "alerts.rollback_margin = -1 is not allowed: expected an integer >= 0"),
    (("[alerts]", "[alerts]\nwindows = 5"), "unknown key alerts.windows; allowed: k, rollback_margin, window"),
])
def test_errors_name_key_value_and_rule(tmp_path, edit, message):
    write_run_config(tmp_path, RunConfig.from_preset("tiny"))
    path = tmp_path / "run.toml"
    old, new = edit
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_run_config(tmp_path)
    assert message in str(err.value)


def test_caps_must_reach_one(tmp_path):
    write_run_config(tmp_path, RunConfig.from_preset("tiny"))
    path = tmp_path / "run.toml"
    path.write_text(path.read_text().replace("cap = 0.8", "cap = 0.2"))
    with pytest.raises(ConfigError, match=r"the caps of \[arms\] sum to 0.6"):
        load_run_config(tmp_path)


def test_missing_and_unreadable(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_run_config(tmp_path)
    (tmp_path / "run.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_run_config(tmp_path)


def test_alerts_defaults_and_a_run_toml_without_them(tmp_path):
    config = RunConfig.from_preset("tiny")
    assert (config.alerts.window, config.alerts.k, config.alerts.rollback_margin) == (100, 10.0, 100)
    write_run_config(tmp_path, config)
    path = tmp_path / "run.toml"
    text = path.read_text()
    path.write_text(text[: text.index("[alerts]")])       # the last section: a run.toml from before it
    assert "[alerts]" not in path.read_text()
    assert load_run_config(tmp_path).alerts == config.alerts
    path.write_text(path.read_text() + "\n[alerts]\nwindow = 50\nk = 6\n")
    loaded = load_run_config(tmp_path).alerts
    assert (loaded.window, loaded.k, loaded.rollback_margin) == (50, 6, 100)
