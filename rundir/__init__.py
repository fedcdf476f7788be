"""The run-directory library: every file of the trainer/console contract (docs/contract.md).

Torch-free (numpy, orjson, msgspec and psutil only), so that the console can import it.
One module per file kind:

- :mod:`.layout`      the vocabulary: every file name, the checkpoint pattern, event names, signals
- :mod:`.checkpoint`  ``step_NNNNNN.bin`` / ``.json``: list, quick-validate, map, write
- :mod:`.resume_record` ``step_NNNNNN.json`` (the resume contract) as a typed record
- :mod:`.history`     ``.loss.json`` (a package): appender, incremental reader, tail reader, and the one rule for a line
- :mod:`.resume_check` whether a resume re-ran its logged steps bit for bit
- :mod:`.sidecars`    ``.state.json`` and ``.samples.json``
- :mod:`.trainer_record` ``.trainer.json`` as a typed record, and whether a live process is the one it names
- :mod:`.process`     ``.lock``, verifying and signalling the trainer
- :mod:`.ranks`       ``.rank-NNNNN.json``: every rank of a job, read by launch and judged;
                      :mod:`.rank_heartbeat` writes it, :mod:`.stacks` asks every rank for its stacks
- :mod:`.config`      ``run.toml``
- :mod:`.run`         the run API: any training loop operated as andrea-train is (``open_run``);
                      :mod:`.integrations` its framework callbacks
- :mod:`.job`         the run API's job of several processes: each one's rank, their launch, the all-reduce;
                      :mod:`.agreement` the job's one decision on the requests its ranks received
- :mod:`.external`    a trainer's own checkpoints, as ``external_checkpoint`` events
- :mod:`.sources`     the arms' data sources; :mod:`.zombies` arms whose data is gone
- :mod:`.atomic`      atomic replacement, the only way these files are rewritten
- :mod:`.safe_read`   bounded, non-blocking reads that never raise, the only way they are read
- :mod:`.text`        :func:`~rundir.text.printable`: what any of them holds, made safe to show on a terminal

What the console makes of these files (spikes, the overview's summaries, the history's mirror
in the user's cache) is the console's: under console/, in its layers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Submodules load on first use (PEP 562), so a process that needs one file kind (the
# console's history reader, forked before the UI is imported) pays for that one only.
_EXPORTS = {
    "checkpoint": ("CheckpointArrays", "CheckpointError", "CheckpointInfo", "CheckpointStamp", "checkpoint_path",
                   "checkpoint_stamps", "checkpoints_since", "inspect_checkpoint", "latest_resumable",
                   "list_checkpoints", "newest_complete_since", "open_checkpoint", "read_sidecar", "verify_checksum",
                   "write_checkpoint"),
    "config": ("ConfigError", "RunConfig", "load_run_config", "write_run_config"),
    "history": ("HistoryEvent", "HistoryUpdate", "LossHistory", "LossHistoryWriter"),
    "process": ("RunLock", "RunLockedError", "Verification", "signal_trainer", "verify_trainer"),
    "resume_record": ("ResumeRecord", "ResumeState", "RngStates"),
    "run": ("Run", "RunError", "open_run"),
    "trainer_record": ("SlurmPlacement", "TrainerRecord", "read_trainer_record", "remove_trainer_record",
                       "write_trainer_record"),
    "safe_read": ("FileRead", "read_bytes", "read_json", "read_json_object"),
    "sidecars": ("ArmState", "BanditState", "Sample", "SidecarRead", "newest_per_arm", "read_samples", "read_state",
                 "write_samples", "write_state"),
    "zombies": ("find_zombies",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:
    from .checkpoint import (
        CheckpointArrays,
        CheckpointError,
        CheckpointInfo,
        CheckpointStamp,
        checkpoint_path,
        checkpoint_stamps,
        checkpoints_since,
        inspect_checkpoint,
        latest_resumable,
        list_checkpoints,
        newest_complete_since,
        open_checkpoint,
        read_sidecar,
        verify_checksum,
        write_checkpoint,
    )
    from .config import ConfigError, RunConfig, load_run_config, write_run_config
    from .history import HistoryEvent, HistoryUpdate, LossHistory, LossHistoryWriter
    from .process import RunLock, RunLockedError, Verification, signal_trainer, verify_trainer
    from .resume_record import ResumeRecord, ResumeState, RngStates
    from .run import Run, RunError, open_run
    from .safe_read import FileRead, read_bytes, read_json, read_json_object
    from .sidecars import (
        ArmState,
        BanditState,
        Sample,
        SidecarRead,
        newest_per_arm,
        read_samples,
        read_state,
        write_samples,
        write_state,
    )
    from .trainer_record import (
        SlurmPlacement,
        TrainerRecord,
        read_trainer_record,
        remove_trainer_record,
        write_trainer_record,
    )
    from .zombies import find_zombies


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
