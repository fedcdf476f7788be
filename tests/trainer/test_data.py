"""Data arms: the tokenizer's digest and the samplers' exact state."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
import torch

from trainer.data import ArmData, ArmDataError, ArmSampler, ByteTokenizer, SamplerStateError


def arm(tmp_path, name="a", text="hello world, " * 40):
    (tmp_path / f"{name}.txt").write_text(text)
    return ArmData.load(name, f"{name}.txt", tmp_path, block_size=8)


def test_tokenizer_is_bytes_with_a_stable_digest():
    tok = ByteTokenizer()
    assert tok.encode("é") == [0xC3, 0xA9]
    assert tok.decode(tok.encode("héllo")) == "héllo"
    assert tok.digest.startswith("sha256:") and tok.digest == ByteTokenizer().digest
    assert tok.state_dict()["rules"]["vocab_size"] == 256


def test_sampler_walks_a_permutation_per_epoch(tmp_path):
    data = arm(tmp_path)
    sampler = ArmSampler(data, block_size=8, batch_size=4, seed=7)
    n = sampler.n_train                          # the held-out windows are never drawn
    seen = np.concatenate([sampler.next_windows() for _ in range(n)])   # 4 epochs' worth
    for epoch in range(4):
        assert sorted(seen[epoch * n:(epoch + 1) * n]) == list(range(n))
    assert sampler.epoch == 3 and sampler.windows_drawn == 4 * n


def test_batch_is_input_and_shifted_target(tmp_path):
    sampler = ArmSampler(arm(tmp_path), block_size=8, batch_size=3, seed=1)
    x, y = sampler.next_batch()
    assert x.shape == y.shape == (3, 8) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_state_round_trip_through_json_continues_exactly(tmp_path):
    data = arm(tmp_path)
    a = ArmSampler(data, 8, 5, seed=7)
    for _ in range(7):
        a.next_batch()
    saved = orjson.loads(orjson.dumps(a.state_dict()))
    b = ArmSampler(data, 8, 5, seed=999)          # a different seed: everything must come from the state
    b.load_state_dict(saved)
    for _ in range(20):                           # across epoch boundaries
        xa, _ = a.next_batch()
        xb, _ = b.next_batch()
        assert torch.equal(xa, xb)
    assert a.position() == b.position()


def test_state_for_other_data_is_refused(tmp_path):
    a = ArmSampler(arm(tmp_path, "a"), 8, 2, seed=7)
    other = ArmSampler(arm(tmp_path, "a", text="other text! " * 50), 8, 2, seed=7)
    with pytest.raises(SamplerStateError, match="data_digest"):
        other.load_state_dict(a.state_dict())


def test_arm_without_data_names_the_arm(tmp_path):
    with pytest.raises(ArmDataError, match="arm 'gone'.*matches no file"):
        ArmData.load("gone", "nothing-here.txt", tmp_path, block_size=8)
    (tmp_path / "short.txt").write_text("tiny")
    with pytest.raises(ArmDataError, match="fewer than one window"):
        ArmData.load("short", "short.txt", tmp_path, block_size=8)


def _old_format(sampler: ArmSampler) -> dict:
    """The state as checkpoints before epoch_generator stored it: the order itself."""
    import base64

    state = sampler.state_dict()
    state.pop("epoch_generator", None)
    state["order"] = base64.b64encode(sampler.order.astype("<i4").tobytes()).decode("ascii")
    return state


def test_the_order_is_recomputed_not_stored(tmp_path):
    data = arm(tmp_path, text="some words to sample from. " * 4000)     # thousands of windows
    a = ArmSampler(data, 8, 4, seed=7)
    a.next_batch()
    state = a.state_dict()
    assert "order" not in state and a.n_windows > 10_000
    assert len(orjson.dumps(state)) < 1_000                 # was n_windows x 4 bytes of base64


@pytest.mark.parametrize("batches", [1, 7, 60])             # within the first epoch, and later ones
def test_a_state_in_the_older_format_still_resumes_exactly(tmp_path, batches):
    data = arm(tmp_path)
    a = ArmSampler(data, 8, 5, seed=7)
    for _ in range(batches):
        a.next_batch()
    b = ArmSampler(data, 8, 5, seed=999)
    b.load_state_dict(orjson.loads(orjson.dumps(_old_format(a))))
    for _ in range(30):                                     # across epoch boundaries
        xa, _ = a.next_batch()
        xb, _ = b.next_batch()
        assert torch.equal(xa, xb)
        c = ArmSampler(data, 8, 5, seed=3)                  # and b's own state, saved again, still resumes
        c.load_state_dict(orjson.loads(orjson.dumps(b.state_dict())))
        assert c.position() == b.position() and np.array_equal(c.order, b.order)


def test_a_damaged_state_leaves_the_sampler_fresh(tmp_path):
    data = arm(tmp_path)
    a = ArmSampler(data, 8, 5, seed=7)
    for _ in range(9):
        a.next_batch()
    state = a.state_dict()
    state["generator"] = dict(state["generator"], state="12345")
    fresh, damaged = ArmSampler(data, 8, 5, seed=7), ArmSampler(data, 8, 5, seed=7)
    with pytest.raises(SamplerStateError, match="does not end at the saved generator state"):
        damaged.load_state_dict(state)
    del state["epoch_generator"]
    with pytest.raises(SamplerStateError, match="damaged"):
        damaged.load_state_dict(state)
    for _ in range(10):
        assert torch.equal(fresh.next_batch()[0], damaged.next_batch()[0])
