"""``step_NNNNNN.json`` as a typed record: written once, read the same way everywhere, and
compatible with the files written before it was typed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rundir import ResumeRecord, ResumeState, RngStates, inspect_checkpoint, read_sidecar, write_checkpoint
from rundir.checkpoint import sidecar_path
from rundir.resume_record import parse_resume_record

# A resume .json as the trainer wrote it before the record was typed (a dict literal): every
# key, with the library's five after the trainer's, and an unknown key of another writer.
OLDER = {
    "trainer": "andrea-train/1",
    "config": {"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8, "vocab_size": 256,
                         "dropout": 0.0, "bias": False},
               "optimizer": {"lr": 0.003, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1}},
    "run_config": {"run": {"preset": "tiny"}},
    "tokenizer": {"rules": "bytes", "digest": "sha256:" + "a" * 64},
    "adam_step": 40, "tokens_seen": 20480, "ema_loss": None,
    "samplers": {"stdlib": {"arm": "stdlib", "cursor": 3}},
    "bandit": {"arms": {"stdlib": {"source": "stdlib"}}},
    "rng": {"torch_cpu": "AAEC", "torch_cuda": ["AwQF"]},
    "torch_version": "2.13.0", "python_version": "3.11.7", "device": "cpu", "threads": 1, "world_size": 1,
    "deterministic": True, "time": 1764403200.5,
    "format_version": 1, "step": 40, "n_params": 3, "checksum": "crc32:0000abcd", "bin_size": 44,
    "another_engine": {"kept": [1, 2]},
}


def test_an_older_json_reads_into_every_field_and_writes_back_the_same():
    record, error = parse_resume_record(OLDER, "step_000040.json")
    assert error is None and isinstance(record, ResumeRecord)
    assert (record.step, record.n_params, record.checksum, record.bin_size) == (40, 3, "crc32:0000abcd", 44)
    assert record.model_config == OLDER["config"]["model"] and record.optimizer_config["lr"] == 0.003
    assert record.tokenizer_digest == "sha256:" + "a" * 64
    assert record.rng == RngStates("AAEC", ("AwQF",))
    assert (record.adam_step, record.tokens_seen, record.world_size, record.threads) == (40, 20480, 1, 1)
    assert record.samplers == OLDER["samplers"] and record.bandit == OLDER["bandit"]
    assert record.extra == {"another_engine": {"kept": [1, 2]}}
    # Fields it did not record (precision, compile, the AdamW kernel...) are None: not recorded.
    assert record.precision is None and record.compile is None and record.adamw is None
    # Written back: the same object, but for the null it held (not recorded is not written).
    assert record.to_dict() == {k: v for k, v in OLDER.items() if v is not None}


@pytest.mark.parametrize("key, value", [("format_version", "1"), ("step", True), ("n_params", None),
                                        ("checksum", 5)])
def test_a_library_field_missing_or_of_another_type_is_no_resume_contract(key, value):
    data = {**OLDER, key: value}
    assert parse_resume_record(data, "step_000040.json") == (None, f"step_000040.json lacks a valid {key!r}")
    del data[key]
    assert parse_resume_record(data, "step_000040.json")[1] == f"step_000040.json lacks a valid {key!r}"


def test_a_newer_format_is_refused():
    assert parse_resume_record({**OLDER, "format_version": 2}, "x.json")[1] == \
        "x.json has format_version 2, newer than 1"


def test_optional_fields_of_another_type_are_dropped_not_trusted():
    data = {**OLDER, "adam_step": "40", "tokens_seen": 1.5, "threads": True, "config": [1], "ema_loss": 2,
            "compile": "yes", "rng": {"torch_cpu": 7, "torch_cuda": ["ok", 3]}, "tokenizer": "bytes"}
    record, _ = parse_resume_record(data, "step_000040.json")
    assert record.adam_step is None and record.tokens_seen is None and record.threads is None
    assert record.config is None and record.model_config is None and record.compile is None
    assert record.ema_loss == 2.0 and isinstance(record.ema_loss, float)       # an integer is a number
    assert record.rng == RngStates(None, None) and record.tokenizer is None and record.tokenizer_digest is None
    assert "adam_step" not in record.extra and "rng" not in record.extra        # known keys never travel in extra


def test_write_checkpoint_completes_the_trainers_state_and_every_reader_gets_the_record(tmp_path):
    w = np.arange(3, dtype=np.float32)
    state = ResumeState(trainer="andrea-train/1", adam_step=7, tokens_seen=99, rng=RngStates("AAEC"),
                        precision="bf16", compile=True, adamw="fused", strict_determinism=False,
                        extra={"note": "kept"})
    info = write_checkpoint(tmp_path, 7, w, w, w, resume=state)
    on_disk = json.loads(sidecar_path(info.path).read_text())
    assert on_disk["rng"] == {"torch_cpu": "AAEC"} and on_disk["note"] == "kept"
    assert (on_disk["precision"], on_disk["compile"], on_disk["adamw"], on_disk["strict_determinism"]) == \
        ("bf16", True, "fused", False)
    assert "ema_loss" not in on_disk and on_disk["bin_size"] == 8 + 12 * 3
    record, error = read_sidecar(sidecar_path(info.path))
    assert error is None and record == info.sidecar == inspect_checkpoint(info.path).sidecar
    assert (record.step, record.n_params, record.adam_step, record.precision) == (7, 3, 7, "bf16")
    with pytest.raises(TypeError, match="ResumeState, not dict"):
        write_checkpoint(tmp_path, 8, w, w, w, resume={"adam_step": 8})    # type: ignore[arg-type]
    assert not list(tmp_path.glob("step_000008*"))                           # refused before any byte
