"""``andrea-console runs/ --check``: every run checked, one line per run with a problem,
the worst run's exit status."""

from __future__ import annotations

from console.cli import main
from tests.rundirs import RunSpec, make_run


def test_runs_check_says_each_run_with_a_problem_and_exits_with_the_worst(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root / "healthy", RunSpec(steps=200, checkpoints=(100, 200)))
    make_run(root / "spiked", RunSpec(steps=200, checkpoints=(100, 200), spikes={190: 20.0}))
    assert main([str(root), "--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("spiked: warning: loss spike at step 190: peak 20")
    make_run(root / "nan", RunSpec(steps=200, checkpoints=(100, 200), spikes={190: 20.0}, nonfinite=(195, 196)))
    assert main([str(root), "--check"]) == 2
    out = capsys.readouterr().out.splitlines()
    # The worst finding first, the rest counted; healthy runs say nothing.
    assert len(out) == 2
    assert out[0] == "nan: error: non-finite loss at steps 195..196 (and 1 more)"
    assert out[1].startswith("spiked: warning: loss spike at step 190")
    # A flag reaches every run's check: with a huge k the spikes are none.
    (root / "nan").rename(tmp_path / "nan")
    assert main([str(root), "--check", "--spike-k", "1000"]) == 0
    assert capsys.readouterr().out == "healthy: 2 runs, no problems\n"

