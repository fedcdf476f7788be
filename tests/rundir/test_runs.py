"""A runs directory: which subdirectories are runs, and each run's cheap summary."""

from __future__ import annotations

import math

from console.model.findings import summary_problems
from console.read.run_summary import RunsSummarizer, summarize_run, summarize_runs
from rundir.history import TAIL_BYTES, LossHistory, read_history_tail
from rundir.layout import LOSS_JSON
from rundir.runs import is_run_dir, is_runs_dir, list_runs
from tests.rundirs import make_run


def test_runs_are_found_and_junk_is_named(tmp_path):
    root = tmp_path / "runs"
    make_run(root / "a")
    make_run(root / "other-engine", history_format="array", with_run_toml=False, with_state=False,
             with_samples=False, checkpoints=())
    make_run(root / "only-config", steps=0, checkpoints=(), with_state=False, with_samples=False)
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("x")
    (root / "README").write_text("not a directory")
    (root / ".hidden").mkdir()
    listing = list_runs(root)
    assert [p.name for p in listing.runs] == ["a", "only-config", "other-engine"]
    assert [name for name, _ in listing.skipped] == ["notes"]
    assert "not a run" in listing.skipped[0][1]
    assert is_runs_dir(root) and not is_runs_dir(root / "a") and is_run_dir(root / "a")
    assert not is_runs_dir(root / "notes") and not is_runs_dir(tmp_path / "missing")


def test_a_missing_root_is_an_error_not_a_crash(tmp_path):
    listing = list_runs(tmp_path / "missing")
    assert listing.runs == () and "cannot list" in listing.error


def test_tail_of_a_big_history_agrees_with_the_full_parse(tmp_path):
    run = make_run(tmp_path / "run", steps=20_000, checkpoints=(), with_state=False, with_samples=False)
    tail = read_history_tail(run / LOSS_JSON)
    full = LossHistory(run / LOSS_JSON)
    full.refresh()
    assert not tail.complete and 0 < len(tail.step) < 2_000
    assert tail.step[-1] == full.step[-1] == 20_000
    assert (tail.loss == full.loss[-len(tail.loss):]).all()
    assert (tail.step == full.step[-len(tail.step):]).all()


def test_tail_reads_only_the_end(tmp_path):
    """Garbage at the head of a long history is never read by the tail reader."""
    run = make_run(tmp_path / "run", steps=5_000, checkpoints=(), with_state=False, with_samples=False)
    path = run / LOSS_JSON
    data = path.read_bytes()
    path.write_bytes(b"\x00garbage\n" * 1000 + data)
    tail = read_history_tail(path)
    assert tail.bad_lines == 0 and tail.step[-1] == 5_000
    assert tail.size > TAIL_BYTES and not tail.complete


def test_tail_of_a_json_array_history(tmp_path):
    run = make_run(tmp_path / "run", steps=3_000, history_format="array", checkpoints=())
    tail = read_history_tail(run / LOSS_JSON)
    assert tail.format == "array" and tail.step[-1] == 3_000 and len(tail.step) > 100


def test_tail_counts_torn_and_bad_lines(tmp_path):
    run = make_run(tmp_path / "run", bad_lines=("garbage",), torn_tail='{"step": 30')
    tail = read_history_tail(run / LOSS_JSON)
    assert tail.bad_lines == 1 and tail.torn_tail == len('{"step": 30') and tail.step[-1] == 300


def test_summary_of_a_healthy_run(tmp_path):
    run = make_run(tmp_path / "run", steps=1_000, checkpoints=(500, 1_000))
    s = summarize_run(run, now=0.0)
    assert s.name == "run" and s.trainer_state == "stopped" and s.last_step == 1_000
    assert s.newest_checkpoint.step == 1_000 and s.checkpoints == 2
    assert math.isclose(s.steps_per_s, 2.0) and s.tokens == 1_000 * 512
    assert 1.0 < s.ema_loss < 3.0 and s.disk_used > 0 and summary_problems(s) == ()


def test_summary_counts_the_problems(tmp_path):
    run = make_run(tmp_path / "run", trainer_record="stale", nonfinite=(299,), checkpoints=(100, 200, 300),
                   truncated=(300,), state_arms=("stdlib-code", "gone-arm"))
    s = summarize_run(run, now=0.0)
    text = "\n".join(p.text for p in summary_problems(s))
    assert s.trainer_state == "stale" and "trainer stale" in text
    assert "non-finite" in text and "step_000300.bin: invalid: truncated" in text and "zombie arm gone-arm" in text
    assert [p.kind for p in summary_problems(s)] == ["trainer", "invalid", "zombie", "nonfinite"]
    assert s.newest_checkpoint.step == 200 and len(summary_problems(s)) == 4


def test_summaries_sorted_by_latest_activity(tmp_path):
    root = tmp_path / "runs"
    make_run(root / "old", steps=100, checkpoints=(100,))
    make_run(root / "new", steps=900, checkpoints=(900,))
    summaries, _ = summarize_runs(root, now=0.0)
    assert [s.name for s in summaries] == ["new", "old"]


def test_the_summarizer_keeps_what_did_not_change(tmp_path):
    root = tmp_path / "runs"
    make_run(root / "done", steps=100, checkpoints=(100,))
    summarizer = RunsSummarizer(root)
    first, _ = summarizer.scan(now=0.0)
    again, _ = summarizer.scan(now=0.0)
    assert again[0] is first[0]                     # nothing changed: the same summary
    make_run(root / "done", steps=200, checkpoints=(100, 200))
    changed, _ = summarizer.scan(now=0.0)
    assert changed[0] is not first[0] and changed[0].last_step == 200
    make_run(root / "appeared", steps=10, checkpoints=())
    assert {s.name for s in summarizer.scan(now=0.0)[0]} == {"done", "appeared"}


def test_the_summary_memo_keeps_parts_only_while_their_files_stay(tmp_path):
    from console.read.run_summary import SummaryMemo
    from rundir.config import load_run_config, write_run_config

    run = make_run(tmp_path / "run", steps=300, checkpoints=(100, 200))
    memo = SummaryMemo()
    first = summarize_run(run, now=0.0, memo=memo)
    again = summarize_run(run, now=0.0, memo=memo)
    assert again.newest_checkpoint is first.newest_checkpoint            # kept: nothing changed
    config = load_run_config(run)
    config.run.max_steps = 12_345
    write_run_config(run, config)
    (run / "step_000300.bin").write_bytes((run / "step_000200.bin").read_bytes())
    changed = summarize_run(run, now=0.0, memo=memo)
    assert changed.max_steps == 12_345                                     # run.toml read again
    assert changed.checkpoints == first.checkpoints + 1                   # the directory listed again
