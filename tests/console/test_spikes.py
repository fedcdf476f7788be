"""Spike detection on synthetic histories, and the incremental detector against the batch one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.model.spikes import DEFAULT_K, DEFAULT_WINDOW, Spike, SpikeDetector, find_spikes


def _noisy(n: int, level: float = 2.5, sigma: float = 0.02, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.arange(1, n + 1, dtype=np.int64), level + sigma * rng.standard_normal(n)


def test_one_step_spike_is_one_spike() -> None:
    steps, loss = _noisy(2000)
    loss[1200] = 6.0
    spikes = find_spikes(steps, loss)
    assert spikes == [Spike(1201, 1201, 1201, 6.0, spikes[0].baseline)]
    assert abs(spikes[0].baseline - 2.5) < 0.01


def test_plateau_of_40_steps_is_one_spike() -> None:
    steps, loss = _noisy(2000)
    loss[1000:1040] += 1.5
    spikes = find_spikes(steps, loss)
    assert len(spikes) == 1
    assert (spikes[0].start, spikes[0].end) == (1001, 1040)
    assert spikes[0].peak_loss == loss[1000:1040].max()


def test_nan_run_is_listed_not_a_spike() -> None:
    steps, loss = _noisy(1000)
    loss[500:510] = np.nan
    loss[510] = np.inf
    detector = SpikeDetector()
    detector.update(steps, loss)
    assert detector.spikes == []
    assert detector.nonfinite_steps == list(range(501, 512))


def test_noisy_flat_loss_has_no_spike() -> None:
    for seed in range(5):
        steps, loss = _noisy(20_000, seed=seed)
        assert find_spikes(steps, loss) == []


def test_slow_drift_has_no_spike() -> None:
    up_steps, up = _noisy(5000, sigma=0.01)
    up += np.linspace(0, 2.0, 5000)            # rising slowly: the baseline follows
    assert find_spikes(up_steps, up) == []
    down = 5.0 * np.exp(-np.arange(5000) / 800) + 1.5 + 0.01 * np.random.default_rng(3).standard_normal(5000)
    assert find_spikes(up_steps, down) == []


def test_flat_loss_mad_floor() -> None:
    steps = np.arange(1, 501, dtype=np.int64)
    loss = np.full(500, 2.0)
    loss[300] = 2.0 + 1e-6                     # a rise far below k thousandths: no spike
    assert find_spikes(steps, loss) == []
    loss[400] = 2.5
    assert [s.start for s in find_spikes(steps, loss)] == [401]


def test_first_window_is_never_flagged() -> None:
    steps, loss = _noisy(300)
    loss[50] = 100.0
    assert find_spikes(steps, loss, window=DEFAULT_WINDOW) == []


@pytest.mark.parametrize("window, k", [(4, 3.0), (100, 0.0), (100, float("nan")), (True, 3.0)])
def test_bad_parameters_are_refused(window: int, k: float) -> None:
    with pytest.raises(ValueError):
        SpikeDetector(window, k)


def test_incremental_after_a_rewrite_matches_batch() -> None:
    steps, loss = _noisy(3000)
    detector = SpikeDetector()
    detector.update(steps[:2000], loss[:2000])
    rewritten = loss.copy()
    rewritten[1500] = 9.0                      # a resume re-ran step 1501 with another loss
    assert detector.update(steps, rewritten, changed_from=1501)
    assert detector.spikes == find_spikes(steps, rewritten)
    assert [s.start for s in detector.spikes] == [1501]


_losses = st.lists(st.one_of(st.floats(0.0, 10.0), st.sampled_from([np.nan, np.inf, 50.0])), min_size=0,
                   max_size=400)


@settings(max_examples=200, deadline=None)
@given(_losses, st.lists(st.integers(0, 400), max_size=6), st.integers(8, 40), st.floats(0.5, 12.0),
       st.data())
def test_incremental_equals_batch(values: list[float], cuts: list[int], window: int, k: float,
                                  data: st.DataObject) -> None:
    steps = np.arange(1, len(values) + 1, dtype=np.int64) * 2
    loss = np.array(values, np.float64)
    detector = SpikeDetector(window, k)
    for cut in sorted(min(c, len(values)) for c in cuts):
        detector.update(steps[:cut], loss[:cut])
        # Sometimes the rows from some step on are replaced (a resume re-ran them).
        if cut and data.draw(st.booleans()):
            at = data.draw(st.integers(0, cut - 1))
            loss[at:cut] = data.draw(st.floats(0.0, 60.0))
            detector.update(steps[:cut], loss[:cut], changed_from=int(steps[at]))
    detector.update(steps, loss)
    expected = find_spikes(steps, loss, window, k)
    assert detector.spikes == expected
    assert detector.nonfinite_steps == steps[~np.isfinite(loss)].tolist()
    # Each flagged step really is above its baseline's median.
    for spike in expected:
        assert spike.peak_loss > spike.baseline


def test_defaults_are_documented() -> None:
    assert (DEFAULT_WINDOW, DEFAULT_K) == (100, 10.0)
