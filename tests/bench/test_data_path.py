"""How ``bench data_path`` counts a history line's way: calls and hand-overs between modules
are hops, returns are not, and a module entered again after the way went on is named."""

from __future__ import annotations

from bench.bench_data_path import count, walk

WRITE = [("trainer/outputs.py", "RunOutputs.step", 1), ("rundir/history/writer.py", "append", 2)]
WATCH = [("console/tui/app.py", "watch_files", 3), ("console/read/watcher.py", "_follow_events", 4),
         ("console/read/watcher.py", "PacedReads.request", 5)]
READ = [("console/tui/app.py", "read_loop", 6), ("console/read/watcher.py", "PacedReads.drain", 7),
        ("console/read/reader.py", "RunReader.read", 8), ("rundir/history/reader.py", "LossHistory._read_lines", 17)]
BYTES = READ + [("rundir/history/blocks.py", "read_into", 9)]
# The ingest's first frame has the identity the read's had: an id is reused once a frame is gone.
SCAN = READ + [("rundir/history/ingest.py", "Ingest._typed_block", 9), ("rundir/_line_scan.c", "scan", 0)]
COLUMN = READ + [("rundir/history/ingest.py", "Ingest._typed_block", 9),
                 ("rundir/history/ingest.py", "Ingest._add_block", 10), ("rundir/history/columns.py", "extend", 11)]
SHOW = [("console/tui/app.py", "ConsoleApp.on_snapshot_ready", 12),
        ("console/tui/widgets/loss_plot.py", "LossPlot.show", 13)]
ENVELOPE = [("console/tui/widgets/loss_plot.py", "LossPlot.render_line", 14),
            ("console/plot/envelope.py", "envelope", 15)]


def test_the_way_walks_back_up_between_stacks_and_counts_only_calls_and_hand_overs():
    way = walk([WRITE, WATCH, BYTES, SCAN, COLUMN, SHOW, ENVELOPE])
    assert ("return", "rundir/history/ingest.py", "Ingest._typed_block") in way      # back from the scanner
    assert way.index(("return", "rundir/history/reader.py", "LossHistory._read_lines")) \
        < way.index(("call", "rundir/history/ingest.py", "Ingest._typed_block"))    # back from the read, not shared
    assert way.index(("return", "console/read/watcher.py", "PacedReads.drain")) \
        < way.index(("hand-over", "", "SnapshotReady"))                              # the loop posts the snapshot
    assert not any(rel == "console/tui/app.py" and name in ("watch_files", "read_loop") for _, rel, name in way)
    hops, modules, twice = count(way)
    # outputs > writer > (file) watcher > reader > history reader > blocks, > ingest > C, ingest > columns,
    # (message) app > loss_plot > envelope
    assert hops == 11 and twice == []
    assert modules[:3] == ["trainer/outputs.py", "rundir/history/writer.py", "console/read/watcher.py"]


def test_a_module_the_way_enters_again_is_named():
    back = [("console/tui/app.py", "ConsoleApp.on_snapshot_ready", 12), ("console/read/reader.py", "again", 16),
            ("console/tui/widgets/loss_plot.py", "LossPlot.show", 13)]
    hops, _, twice = count(walk([WRITE, WATCH, BYTES, SCAN, COLUMN, back, ENVELOPE]))
    assert twice == ["console/read/reader.py"] and hops == 12       # app > reader > loss_plot: one more
