"""The spike detector keeps a bounded window of finite losses (console/model/spikes.py), not every
one it read: fed a long history a chunk at a time, with non-finite and absent losses, rewinds
within the window and far before it (a rollback), and carried on from its kept state, it
finds exactly the spikes of the whole history scanned at once."""

from __future__ import annotations

import numpy as np

from console.model.spikes import SpikeDetector, _flag, _group
from rundir.history.records import nonfinite_mask

WINDOW, K = 100, 6.0


def _full(steps: np.ndarray, losses: np.ndarray) -> tuple[list, list[int]]:
    """The spikes and non-finite steps of every finite loss at once (no detector, no window)."""
    ok = np.isfinite(losses)
    finite, where = losses[ok], steps[ok]
    index, base = _flag(finite, WINDOW, len(finite), WINDOW, K)
    return _group(index, where[index], finite[index], base), steps[nonfinite_mask(losses)].tolist()


def _history(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    losses = 3.0 - np.arange(n) / n + rng.normal(0, 0.01, n)
    spikes = rng.choice(np.arange(WINDOW, n), 60, replace=False)
    losses[spikes] += rng.uniform(0.5, 3.0, len(spikes))
    losses[rng.choice(n, 40, replace=False)] = np.inf
    losses[rng.choice(n, 300, replace=False)] = np.nan              # absent: no loss on the line
    return np.arange(1, n + 1, dtype=np.int64), losses


def _check(detector: SpikeDetector, steps: np.ndarray, losses: np.ndarray) -> None:
    spikes, nonfinite = _full(steps, losses)
    assert len(spikes) > 20
    assert detector.spikes == spikes
    assert detector.nonfinite_steps == nonfinite
    # Bounded: the window, not the 300,000 finite losses read.
    assert len(detector._finite._data) < 20 * WINDOW + (1 << 13), len(detector._finite._data)


def test_windowed_detection_equals_the_whole_history_through_rewinds_and_a_rollback() -> None:
    n = 300_000
    steps, losses = _history(n, 1)
    detector = SpikeDetector(WINDOW, K)
    for end in range(1_000, n + 1, 7_919):                  # a live run, refresh after refresh
        detector.update(steps[:end], losses[:end])
    detector.update(steps, losses)
    _check(detector, steps, losses)

    # A rewind within the window: the last 30 steps written again with other losses.
    losses = losses.copy()
    losses[-30:] = 2.5
    detector.update(steps, losses, changed_from=int(steps[-30]))
    _check(detector, steps, losses)

    # A rollback far before the window (to step 120,000): the steps after it abandoned and run
    # again with other losses (another spike among them); the baseline is read again from the rows.
    back = 120_000
    rng = np.random.default_rng(2)
    rerun = 2.0 + rng.normal(0, 0.01, n - back)
    rerun[5_000] += 4.0
    losses = np.concatenate([losses[:back], rerun])
    for end in range(back + 500, n + 1, 50_000):
        detector.update(steps[:end], losses[:end], changed_from=back + 1 if end == back + 500 else None)
    detector.update(steps, losses)
    _check(detector, steps, losses)

    # Carried on from its kept state (as beside the mirror), then rows appended.
    kept = SpikeDetector(WINDOW, K)
    clean = np.where(np.isnan(losses), 2.0, losses)         # a kept state has no absent losses
    kept.update(steps[:-5_000], clean[:-5_000])
    carried = SpikeDetector.from_state_dict(kept.state_dict(), steps, clean)
    assert carried is not None
    carried.update(steps, clean)
    _check(carried, steps, clean)
