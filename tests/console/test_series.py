"""Series other than the loss: the registry's values on real run directories, the grad-norm
spikes, and the headless forms (``--once --metric``, ``--json`` and ``--json --metric``)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from console.model.series import RATE_WINDOW, SHARE_WINDOW, available, series_values, value_at
from console.read.reader import RunReader
from tests.console.test_cli import console
from tests.rundirs import EPOCH


def read(run):
    snap, _ = RunReader(run, now=lambda: EPOCH + 10_000).read()
    return snap


def test_every_series_of_a_generated_run_and_what_it_says(make_run_dir):
    # 0.5 s a step, 512 tokens a step; a resume after a 30 s pause at step 400 back to 300.
    snap = read(make_run_dir(steps=600, restarts=((400, 300, 30.0, True),)))
    h = snap.history
    assert available(h)[:5] == ["loss", "grad_norm", "lr", "tokens_per_s", "steps_per_s"]
    assert {"share/stdlib-code", "share/pydoc-topics", "share/stdlib-docstrings"} <= set(available(h))
    steps, tps = series_values(h, "tokens_per_s")
    assert np.allclose(tps[np.isfinite(tps)], 1024.0)          # no window across the pause
    assert np.isnan(tps[0]) and np.isnan(tps[int(np.searchsorted(steps, 301))])   # a segment's first step
    _, sps = series_values(h, "steps_per_s")
    assert np.nanmax(sps) == pytest.approx(2.0) and np.nanmin(sps) == pytest.approx(2.0)
    _, share = series_values(h, "share/stdlib-code")
    assert abs(share[-1] - 1 / 3) < 0.02 and len(share) == h.n_steps
    assert value_at(h, "grad_norm", 10) == pytest.approx(float(h.column("grad_norm")[1][9]))
    assert RATE_WINDOW == 50 and SHARE_WINDOW == 100


def test_an_unknown_series_names_those_there_are(run_dir):
    with pytest.raises(KeyError, match="unknown series 'nope'; this history has: loss, grad_norm"):
        series_values(read(run_dir).history, "nope")


def test_a_grad_norm_spike_is_its_own_marker(make_run_dir, tmp_path):
    run = make_run_dir(steps=400)
    lines = (run / ".loss.json").read_text().splitlines()
    # The generator's grad norms lie in [0.5, 1.5): one of 50 is far beyond.
    edited = [json.dumps({**rec, "grad_norm": 50.0}) if (rec := json.loads(line)).get("step") == 250
              and "loss" in rec else line for line in lines]
    (run / ".loss.json").write_text("\n".join(edited) + "\n")
    snap = read(run)
    assert [s.peak_step for s in snap.history.grad_spikes] == [250]
    assert ("grad_spike", 250) in {(m.kind, m.step) for m in snap.markers}
    assert not snap.history.spikes                            # the loss did not spike
    once = console(run, "--once").stdout
    assert "∇ grad-norm spike" in once and "  ∇ grad-norm spike at step 250: peak 50 at 250" in once
    assert [s["peak_step"] for s in json.loads(console(run, "--json").stdout)["history"]["grad_norm_spikes"]] == [250]


def test_run_toml_console_plots_is_checked_and_written_only_when_given(tmp_path):
    from rundir import RunConfig
    from rundir.config import ConfigError, dump_run_config

    config = RunConfig.from_preset("micro")
    assert "[console]" not in dump_run_config(config)          # every run.toml without one stays as it was
    data = config.to_dict()
    data["console"] = {"plots": ["lr", "share/stdlib-code"]}
    assert RunConfig.from_dict(data).console.plots == ["lr", "share/stdlib-code"]
    for bad in ("loss", [], ["a", "b", "c", "d", "e"], ["loss", 3]):
        data["console"] = {"plots": bad}
        with pytest.raises(ConfigError, match="run.toml: console.plots = .* is not allowed: a list of 1 to 4"):
            RunConfig.from_dict(data)


def test_zoom_and_pan_stay_inside_the_history():
    from console.plot.view import MIN_SPAN, panned, visible_rows, zoomed

    full = (1, 1000)
    assert zoomed(None, full, 2.0) == (250, 750)
    assert zoomed(None, full, 2.0, center=990) == (495, 995)     # the cursor keeps its place in the view
    assert zoomed((100, 110), full, 4.0) == (101, 101 + MIN_SPAN)  # never narrower than MIN_SPAN steps
    assert zoomed((100, 600), full, 0.5) is None                 # wider than the history: all of it
    assert panned((900, 1000), full, 1) == (900, 1000) and panned((1, 101), full, -1) == (1, 101)
    assert panned((400, 500), full, 1) == (425, 525)
    steps = np.arange(1, 1001)
    rows = visible_rows(steps, (400, 500))
    assert steps[rows][0] == 400 and steps[rows][-1] == 500


def test_headless_json_lists_the_series_and_gives_one_as_its_envelope(make_run_dir):
    run = make_run_dir(steps=600, spikes={450: 30.0})
    listed = json.loads(console(run, "--json").stdout)["series"]
    assert {k: listed[0][k] for k in ("name", "label", "points", "first_step", "last_step")} == \
        {"name": "loss", "label": "loss", "points": 600, "first_step": 1, "last_step": 600}
    # The summary of each series: the loss's best is its min, the spike its max.
    assert (listed[0]["max"], listed[0]["max_step"]) == (30.0, 450)
    assert (listed[0]["best"], listed[0]["best_step"]) == (listed[0]["min"], listed[0]["min_step"])
    assert listed[0]["last"] == json.loads(console(run, "--json").stdout)["history"]["last_loss"]
    lr = next(s for s in listed if s["name"] == "lr")
    assert lr["best"] is None and lr["best_step"] is None          # neither way is better
    assert {s["name"] for s in listed} >= {"grad_norm", "lr", "tokens_per_s", "steps_per_s"}
    r = console(run, "--json", "--metric", "loss", "--range", "400:500", "--points", "4")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["metric"] == "loss" and len(data["buckets"]) == 4
    assert data["buckets"][0]["first_step"] == 400 and data["buckets"][-1]["last_step"] == 500
    assert sum(b["n"] for b in data["buckets"]) == 101
    assert max(b["max"] for b in data["buckets"]) == 30.0       # the one-step spike is kept


def test_buckets_give_first_last_mean_and_the_steps_of_min_and_max(make_run_dir, capsys):
    from console.cli import main

    run = make_run_dir(steps=600, spikes={450: 30.0})
    losses = {s: v for s, v in zip(*read(run).history.column("loss"))}
    assert main([str(run), "--json", "--metric", "loss", "--range", "401:500", "--points", "4"]) == 0
    buckets = json.loads(capsys.readouterr().out)["buckets"]
    assert [(b["first_step"], b["last_step"], b["n"]) for b in buckets] == [(401, 425, 25), (426, 450, 25),
                                                                            (451, 475, 25), (476, 500, 25)]
    for b in buckets:
        mine = {s: v for s, v in losses.items() if b["first_step"] <= s <= b["last_step"]}
        assert b["first"] == mine[b["first_step"]] and b["last"] == mine[b["last_step"]]
        assert b["mean"] == pytest.approx(sum(mine.values()) / len(mine))
        assert mine[b["min_step"]] == b["min"] == min(mine.values())
        assert mine[b["max_step"]] == b["max"] == max(mine.values())
    assert (buckets[1]["max"], buckets[1]["max_step"]) == (30.0, 450)
    # --csv: the same buckets, the same fields, in a spreadsheet's form.
    assert main([str(run), "--csv", "--range", "401:500", "--points", "4"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [{k: float(v) for k, v in row.items()} for row in rows] == buckets


def test_csv_writes_every_step_of_a_series_with_its_tokens_and_time(make_run_dir, capsys):
    from console.cli import main

    run = make_run_dir(steps=600, series=True)
    assert main([str(run), "--csv", "--metric", "eval_loss", "--range", ":400"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["step", "tokens", "time", "eval_loss"]
    steps, values = read(run).history.column("eval_loss")
    assert [(int(r[0]), float(r[3])) for r in rows[1:]] == list(zip(steps[:4].tolist(), values[:4].tolist()))
    assert rows[1][:3] == ["100", str(100 * 512), str(EPOCH + 50.0)]
    assert main([str(run), "--csv"]) == 0                       # the loss, every step
    assert len(capsys.readouterr().out.splitlines()) == 601


def test_headless_once_draws_the_series_over_the_range(run_dir):
    r = console(run_dir, "--once", "--metric", "grad_norm", "--range", "100:200", "--width", "80")
    assert r.returncode == 0, r.stderr
    title = next(line for line in r.stdout.splitlines() if line.startswith("grad-norm (raw + EMA"))
    axis = r.stdout.splitlines()[r.stdout.splitlines().index(title) + 10]
    assert axis.split() == ["100", "150", "200"], axis


@pytest.mark.parametrize("args, says", [
    (("--json", "--metric", "nope"), "unknown series 'nope'; this history has: loss"),
    (("--once", "--metric", "loss", "--range", "9:3"), "--range '9:3': B (3) is before A (9)"),
    (("--once", "--metric", "loss", "--range", "a:b"), "--range 'a:b': A and B must be whole step numbers"),
    (("--once", "--range", "1:2"), "--range and --points go with --metric"),
    (("--once", "--metric", "loss", "--points", "5"), "--points goes with --json --metric or --csv"),
    (("--csv", "--metric", "nope"), "unknown series 'nope'; this history has: loss"),
    (("--json", "--metric", "loss", "--points", "0"), "--points 0: expected 1 to 100,000"),
    (("--check", "--metric", "loss"), "--metric goes with --once"),
])
def test_a_bad_metric_or_range_is_one_line_and_exit_2(run_dir, args, says):
    r = console(run_dir, *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr


def test_a_metric_of_a_run_with_no_history_yet_is_one_line_and_exit_2(make_run_dir):
    r = console(make_run_dir(empty=True), "--json", "--metric", "loss")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "andrea-console: unknown series 'loss'; this history has: none\n"


EVALS = tuple({"event": "eval", "step": s, "eval_loss": 3.0 - s / 1000, "windows": 8,
               "per_arm": {"stdlib-code": 3.1 - s / 1000, "pydoc-topics": 2.9}} for s in range(100, 601, 100))


def test_the_eval_lines_are_the_eval_loss_series_overall_and_per_arm(make_run_dir):
    h = read(make_run_dir(steps=600, events=EVALS)).history
    names = available(h)
    assert names[:2] == ["loss", "eval_loss"] and {"eval_loss/stdlib-code", "eval_loss/pydoc-topics"} <= set(names)
    steps, values = series_values(h, "eval_loss")
    assert steps.tolist() == [100, 200, 300, 400, 500, 600] and values[2] == pytest.approx(2.7)
    assert value_at(h, "eval_loss/stdlib-code", 350) == pytest.approx(2.8)    # the last eval before the step


def test_once_joins_a_sparse_series_into_a_line_as_the_dashboard_does(make_run_dir):
    """The eval loss (an eval every 100 steps) in --once: drawn as the dashboard's cell draws
    it, its points joined into a line across the plot, not smoothed and not a few dots."""
    run = make_run_dir(steps=3000, series=True)
    r = console(run, "--once", "--metric", "eval_loss", "--width", "100")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if "(its points joined;" in line)
    plot = [line[8:] for line in lines[title + 1:title + 9]]
    lit = {col for line in plot for col, ch in enumerate(line) if 0x2800 < ord(ch) <= 0x28FF}
    assert len(lit) >= 85, (len(lit), "\n".join(plot))          # a line across the 92 cells


def test_means_of_huge_values_do_not_overflow(tmp_path):
    """The series table's mean and --json's bucket means sum fractions of the largest value:
    values near a double's limit average to themselves, not to inf (and warn of nothing)."""
    import warnings

    from console.model.series_summary import series_row
    from console.text.series_report import StepRange, bucket_table

    run = tmp_path / "run"
    run.mkdir()
    (run / ".loss.json").write_text("".join(
        json.dumps({"step": s, "loss": v, "lr": 1e-3, "grad_norm": 1.0, "arm": "a", "tokens": s, "time": EPOCH + s})
        + "\n" for s, v in ((1, 1e308), (2, 1.5e308), (3, -1e308), (4, 2.0))))
    h = RunReader(run).read()[0].history
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = series_row(h, "loss")
        buckets = bucket_table(h, "loss", StepRange(), 2)
    assert row.mean == pytest.approx(1e308 / 4 + 1.5e308 / 4 - 1e308 / 4 + 2.0 / 4)
    assert [b[5] for b in buckets] == pytest.approx([1e308 / 2 + 1.5e308 / 2, -1e308 / 2 + 2.0 / 2])


def test_arms_past_the_cap_are_one_others_series_of_their_pulls_together(make_run_dir):
    """40 arms drawn in turn, the first 8 twice as often: the 32 drawn most get series of their
    own (in the history's order), the other 8 one series, whose share is theirs together."""
    from console.model.series import MAX_ARM_SERIES

    arms = tuple(f"arm-{i:02d}" for i in range(40))
    run = make_run_dir(steps=4000, arms=arms[:8] + arms)
    h = read(run).history
    shares = [n for n in available(h) if n.startswith("share/")]
    assert MAX_ARM_SERIES == 32
    assert shares == [f"share/{arm}" for arm in arms[:32]] + ["share/8 other arms"], shares
    _, others = series_values(h, "share/8 other arms")
    _, first = series_values(h, "share/arm-00")
    assert others[-1] == pytest.approx(8 / 48, abs=0.02) and first[-1] == pytest.approx(2 / 48, abs=0.02)
    text = console(str(run), "--once").stdout
    assert "share/8 other arms" in text and "share/arm-39" not in text


def test_the_series_table_never_takes_a_figure_from_an_abandoned_step(tmp_path):
    """Steps 1..60 with an eval at 20 and 50; a rollback from 60 to 30; the resumed trainer
    runs 31..45: the table's last loss is step 45's and the last eval step 20's (the rollback
    abandoned 46..60 and the eval at 50), in the model, --json and --once."""
    from console.model.series_summary import series_row

    run = tmp_path / "run"
    run.mkdir()
    clock = iter(range(10_000))

    def step(s, loss):
        return {"step": s, "loss": loss, "lr": 1e-3, "grad_norm": 1.0, "arm": "a", "tokens": s,
                "time": EPOCH + next(clock)}
    records = [step(s, 2.0 + s / 1000) for s in range(1, 61)]
    records.insert(20, {"event": "eval", "step": 20, "eval_loss": 2.5, "time": EPOCH + next(clock)})
    records.insert(51, {"event": "eval", "step": 50, "eval_loss": 9.5, "time": EPOCH + next(clock)})
    records.append({"event": "rollback", "step": 30, "from_step": 60, "to_step": 30, "time": EPOCH + next(clock)})
    records += [step(s, 3.0 + s / 1000) for s in range(31, 46)]
    (run / ".loss.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    h = RunReader(run, now=lambda: EPOCH + 10_000).read()[0].history
    loss, ev = series_row(h, "loss"), series_row(h, "eval_loss")
    assert (loss.last_step, loss.last, loss.points) == (45, pytest.approx(3.045), 45)
    assert (ev.last_step, ev.last, ev.max) == (20, 2.5, 2.5)
    listed = {s["name"]: s for s in json.loads(console(run, "--json").stdout)["series"]}
    assert (listed["loss"]["last_step"], listed["loss"]["last"]) == (45, pytest.approx(3.045))
    assert (listed["eval_loss"]["last_step"], listed["eval_loss"]["last"]) == (20, 2.5)
    once = console(run, "--once").stdout
    row = next(line.split() for line in once.splitlines() if line.startswith("  eval_loss "))
    assert row[1] == "2.5" or row[1].startswith("2.5"), row


def test_once_with_a_metric_prints_only_that_series(make_run_dir):
    """--once --metric lr: the lr's plot and its summary row, not the whole report (the README's
    "the text plot of one series")."""
    run = make_run_dir(steps=600)
    out = console(run, "--once", "--metric", "lr", "--width", "80").stdout
    lines = out.splitlines()
    assert lines[0].endswith(" · lr") and any(line.startswith("learning rate") or line.startswith("lr")
                                              for line in lines)
    assert "trainer " not in out and "checkpoints (" not in out and "problems (" not in out, out
    rows = [line.split()[0] for line in lines[lines.index("over every step") + 2:] if line.strip()]
    assert rows == ["lr"]


def test_csv_into_a_pipe_closed_early_ends_quietly(make_run_dir):
    """andrea-console RUN --csv | head -2: no BrokenPipeError traceback, exit 0."""
    import subprocess
    import sys

    from tests.console.test_cli import ROOT

    run = make_run_dir(steps=20_000)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    producer = subprocess.Popen([sys.executable, "-m", "console", str(run), "--csv"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=env)
    head = producer.stdout.readline() + producer.stdout.readline()
    producer.stdout.close()                                   # head -2 has what it wanted
    _, err = producer.communicate(timeout=60)
    assert head.startswith(b"step,tokens,time,loss\n")
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
    assert producer.returncode == 0
