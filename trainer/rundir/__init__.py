"""The run-directory library: every file of the trainer/console contract (DESIGN.md).

Torch-free (numpy, orjson, msgspec and psutil only), so that the console can import it.
One module per file kind:

- :mod:`.checkpoint`  ``step_NNNNNN.bin`` / ``.json``: list, quick-validate, map, write
- :mod:`.history`     ``.loss.json``: appender and incremental reader
- :mod:`.sidecars`    ``.state.json`` and ``.samples.json``
- :mod:`.process`     ``.trainer.json``, ``.lock``, verifying and signalling the trainer
- :mod:`.config`      ``run.toml``
- :mod:`.sources`     the arms' data sources; :mod:`.zombies` arms whose data is gone
- :mod:`.atomic`      atomic replacement, the only way these files are rewritten
"""

from .checkpoint import (CheckpointArrays, CheckpointError, CheckpointInfo, checkpoint_path,
                         inspect_checkpoint, latest_resumable, list_checkpoints, open_checkpoint,
                         read_sidecar, verify_checksum, write_checkpoint)
from .config import ConfigError, RunConfig, load_run_config, write_run_config
from .history import LOSS_JSON, HistoryEvent, HistoryUpdate, LossHistory, LossHistoryWriter
from .process import (RunLock, RunLockedError, TrainerRecord, Verification, read_trainer_record,
                      remove_trainer_record, signal_trainer, verify_trainer, write_trainer_record)
from .sidecars import (SAMPLES_JSON, STATE_JSON, ArmState, BanditState, Sample, SidecarRead,
                       newest_per_arm, read_samples, read_state, write_samples, write_state)
from .zombies import find_zombies

__all__ = [name for name in dir() if not name.startswith("_")]
