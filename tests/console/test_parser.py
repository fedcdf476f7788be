"""The command line's grammar (console/commands/parser.py): every "goes with" and "does not
combine" row refuses in its one line, before any mode runs; values out of range name the flag."""

from __future__ import annotations

import pytest

from console.commands.parser import GOES_WITH, NOT_TOGETHER, build_parser, flag, usage_problem

# An argv that gives each option or mode (a zero where a zero is a value, so given means given).
GIVE = {"preset": ["--preset", "micro"], "slurm": ["--slurm"], "sbatch": ["--sbatch=--time=1"],
        "cap": ["--cap", "a=0.5"], "floor": ["--floor", "a=0.1"], "drop": ["--drop", "a"], "yes": ["--yes"],
        "to": ["--to", "0"], "skip_batches": ["--skip-batches", "0"], "host": ["--host", "::1"],
        "port": ["--port", "0"], "allow_control": ["--allow-control"], "max_tabs": ["--max-tabs", "2"],
        "range": ["--range", "1:2"], "points": ["--points", "5"], "metric": ["--metric", "loss"],
        "against": ["--against", "100"], "inspect": ["--inspect"], "notify": ["--notify", "true"],
        "read_only": ["--read-only"]}
# What else a row needs so that an earlier row does not refuse first.
ROW_CONTEXT = {("sbatch",): ["--start"], ("points",): ["--once", "--metric", "loss"]}
PAIR_CONTEXT = {"read_only": ["--serve"]}


def problem(*argv: str) -> str | None:
    return usage_problem(build_parser().parse_args(["run", *argv]))


@pytest.mark.parametrize("options, partners, line", GOES_WITH, ids=lambda row: str(row))
def test_each_option_without_what_it_goes_with_is_refused_in_its_line(options, partners, line):
    for option in options:
        context = ROW_CONTEXT.get(options, [])
        assert problem(*context, *GIVE[option]) == line, option


@pytest.mark.parametrize("option, refused, line", NOT_TOGETHER, ids=lambda row: str(row))
def test_each_pair_that_does_not_combine_is_refused_naming_the_other(option, refused, line):
    for other in refused:
        said = problem(*PAIR_CONTEXT.get(option, []), *GIVE.get(option, [flag(option)]),
                       *GIVE.get(other, [flag(other)]))
        assert said == line.format(flag(other)), (option, other, said)


@pytest.mark.parametrize("argv, says", [
    (["--start", "--rollback"], "--start opens the dashboard; it does not combine with --rollback"),
    (["--inspect", "--check"], "--inspect does not combine with --check"),
    (["--to", "0"], "--to and --skip-batches go with --rollback"),          # a zero is given
    (["--rollback", "--to", "-1"], "--to -1: expected a step number >= 0"),
    (["--smooth", "1"], "--smooth 1.0: expected 0 <= BETA < 1"),
    (["--stall-after", "nan"], "--stall-after nan: expected a number of seconds > 0"),
    (["--notify", "'"], "--notify \"'\": No closing quotation"),
    (["--json", "--metric", "loss", "--points", "0"], "--points 0: expected 1 to 100,000"),
])
def test_a_command_line_is_refused_in_one_line(argv, says):
    assert problem(*argv) == says


@pytest.mark.parametrize("argv", [[], ["--csv"], ["--json", "--metric", "grad_norm", "--points", "5", "--range", "1:"],
                                  ["--rollback", "--to", "0", "--skip-batches", "0", "--yes"],
                                  ["--serve", "--allow-control", "--start", "--yes"], ["--inspect", "--json"],
                                  ["--start", "--slurm", "--sbatch=--time=1", "--preset", "micro"],
                                  ["--pivot", "--cap", "a=0.5", "--floor", "a=0.1", "--drop", "b", "--yes"],
                                  ["--serve", "--host", "::1", "--port", "0", "--max-tabs", "2", "--read-only"],
                                  ["--once", "--metric", "loss", "--range", ":5"], ["--inspect", "--against", "100"]])
def test_what_goes_together_is_accepted(argv):
    """Every row's options with what they go with (the rows above, each the other way)."""
    assert problem(*argv) is None


def test_csv_plots_the_loss_unless_a_metric_is_named():
    args = build_parser().parse_args(["run", "--csv"])
    assert usage_problem(args) is None and args.metric == "loss"
