"""The run directory's vocabulary, spelled once (docs/contract.md#the-run-directorys-files,
docs/contract.md#lossjson-the-history and docs/contract.md#signals-and-the-checkpoint-request).

Every file name of the contract, the temporary-file prefix, the checkpoint-name
pattern, the kind of any name found in a run directory, the history's event names and
what each signal means. The trainer, the console and the tests import these; none of
them spells a file name of its own (a test greps for it).
"""

from __future__ import annotations

import re
import signal

# -- files (docs/contract.md#the-run-directorys-files) ------------------------------------------------
RUN_TOML = "run.toml"
LOSS_JSON = ".loss.json"
STATE_JSON = ".state.json"
SAMPLES_JSON = ".samples.json"
TRAINER_JSON = ".trainer.json"
LOCK_FILE = ".lock"
# Where flock(2) is refused (Lustre noflock, NFS without a lock manager): the lock is this file,
# created O_CREAT|O_EXCL, with its holder and a heartbeat; a takeover of a stale one is made
# under the second (rundir/run_lock.py).
LOCK_OWNER_FILE = ".lock-owner.json"
LOCK_TAKEOVER_FILE = ".lock-takeover"
TRAINER_LOG = "trainer.log"
PIVOT_JOURNAL = ".pivot.json"          # an unfinished pivot's journal
ARCHIVE_DIR = "archive"
PIVOT_RECORD = "pivot.json"            # in each archive/pivot_P_<UTC>/
PIVOT_ARCHIVE_PREFIX = "pivot_"
ROLLBACK_JOURNAL = ".rollback.json"    # an unfinished rollback's journal
ROLLBACK_RECORD = "rollback.json"      # in each archive/rollback_X_<UTC>/
ROLLBACK_ARCHIVE_PREFIX = "rollback_"
# A console's checkpoint request, taken (removed) by the trainer's rank 0 (rundir/checkpoint_request.py,
# docs/contract.md#the-checkpoint-request-file).
CHECKPOINT_REQUEST = ".checkpoint_request.json"
# Where the run API's framework callbacks (rundir/integrations/) save a trainer's own
# checkpoints by default: each is an external_checkpoint event of the history.
EXTERNAL_CHECKPOINTS_DIR = "checkpoints"
# One record per rank of a job of several processes, rewritten atomically by the rank's heartbeat
# thread (rundir/rank_heartbeat.py, read by rundir/ranks.py): `.rank-NNNNN.json`, NNNNN the global rank.
RANK_RECORD_PREFIX = ".rank-"
RANK_RECORD_SUFFIX = ".json"
RANK_RECORD_NAME = re.compile(r"\A\.rank-([0-9]{5,})\.json\Z")
# A console's request for every rank's Python stacks, and each rank's answer (`.stacks-NNNNN.txt`).
STACKS_REQUEST = ".stacks-request.json"
STACKS_ANSWER_PREFIX = ".stacks-"
STACKS_ANSWER_SUFFIX = ".txt"
STACKS_ANSWER_NAME = re.compile(r"\A\.stacks-([0-9]{5,})\.txt\Z")

# Every rewrite goes through a temporary file in the same directory whose name starts
# with this; readers ignore such names, and a trainer removes those left by a writer
# that died.
TMP_PREFIX = ".tmp-"

# -- checkpoints (docs/contract.md#the-checkpoint-binary-format) --------------------------------------------
CHECKPOINT_PREFIX = "step_"
CHECKPOINT_SUFFIX = ".bin"
SIDECAR_SUFFIX = ".json"
CHECKPOINT_NAME = re.compile(r"\Astep_([0-9]{6,})\.bin\Z")   # ASCII digits; no trailing newline


def is_error_stop(reason: object) -> bool:
    """Whether a ``stop`` event's reason says the trainer failed (``error: RuntimeError``): an
    exit to be said as an error, never as a clean one."""
    return isinstance(reason, str) and reason.startswith(STOP_ERROR)


def checkpoint_name(step: int) -> str:
    """``step_NNNNNN.bin``: the step zero-padded to 6 digits (wider past 999,999)."""
    return f"{CHECKPOINT_PREFIX}{step:06d}{CHECKPOINT_SUFFIX}"


def checkpoint_step(name: str) -> int | None:
    """The step a well-formed ``step_NNNNNN.bin`` name carries; None for any other name."""
    match = CHECKPOINT_NAME.match(name)
    return int(match.group(1)) if match else None


def is_checkpoint_bin(name: str) -> bool:
    """Whether a name is a checkpoint's ``.bin`` (well-formed or not: the listing shows both)."""
    return name.startswith(CHECKPOINT_PREFIX) and name.endswith(CHECKPOINT_SUFFIX)


def is_checkpoint_file(name: str) -> bool:
    """A checkpoint's ``.bin`` or its resume ``.json``."""
    return name.startswith(CHECKPOINT_PREFIX) and name.endswith((CHECKPOINT_SUFFIX, SIDECAR_SUFFIX))


def sidecar_name(bin_name: str) -> str:
    """The resume contract's name beside a ``.bin``: same stem, ``.json``."""
    stem = bin_name[:-len(CHECKPOINT_SUFFIX)] if bin_name.endswith(CHECKPOINT_SUFFIX) else bin_name
    return stem + SIDECAR_SUFFIX


def rank_record_name(rank: int) -> str:
    """``.rank-NNNNN.json``: the record of global rank ``rank`` (zero-padded to 5 digits)."""
    return f"{RANK_RECORD_PREFIX}{rank:05d}{RANK_RECORD_SUFFIX}"


def rank_of_record(name: str) -> int | None:
    """The rank a well-formed ``.rank-NNNNN.json`` name carries; None for any other name."""
    match = RANK_RECORD_NAME.match(name)
    return int(match.group(1)) if match else None


def stacks_answer_name(rank: int) -> str:
    """``.stacks-NNNNN.txt``: rank ``rank``'s answer to a stacks request."""
    return f"{STACKS_ANSWER_PREFIX}{rank:05d}{STACKS_ANSWER_SUFFIX}"


def pivot_archive_name(final_step: int, utc_stamp: str) -> str:
    """``archive/pivot_NNNNNN_<UTC>``, relative to the run directory."""
    return f"{ARCHIVE_DIR}/{PIVOT_ARCHIVE_PREFIX}{final_step:06d}_{utc_stamp}"


def rollback_archive_name(to_step: int, utc_stamp: str) -> str:
    """``archive/rollback_NNNNNN_<UTC>``: where a rollback to ``to_step`` sets aside the
    checkpoints after it, relative to the run directory."""
    return f"{ARCHIVE_DIR}/{ROLLBACK_ARCHIVE_PREFIX}{to_step:06d}_{utc_stamp}"


# -- what a change to a name touches ---------------------------------------------
# The kinds of files a change can touch; a reader re-reads only the kinds it is given.
HISTORY, CHECKPOINTS, STATE, SAMPLES, TRAINER, LOG, CONFIG, DIRECTORY = (
    "history", "checkpoints", "state", "samples", "trainer", "log", "config", "directory")
# The ranks' records and stacks answers: rewritten every few seconds by every rank, so a kind of
# their own (re-read when they change and at the trainer's tick, never making the rest read again).
RANKS = "ranks"
ALL_KINDS = frozenset({HISTORY, CHECKPOINTS, STATE, SAMPLES, TRAINER, LOG, CONFIG, DIRECTORY, RANKS})

KNOWN_NAMES = {RUN_TOML: CONFIG, LOSS_JSON: HISTORY, STATE_JSON: STATE, SAMPLES_JSON: SAMPLES,
               TRAINER_JSON: TRAINER, LOCK_FILE: TRAINER, LOCK_OWNER_FILE: TRAINER,
               LOCK_TAKEOVER_FILE: TRAINER, TRAINER_LOG: LOG, ARCHIVE_DIR: DIRECTORY,
               PIVOT_JOURNAL: DIRECTORY, ROLLBACK_JOURNAL: DIRECTORY, CHECKPOINT_REQUEST: TRAINER,
               EXTERNAL_CHECKPOINTS_DIR: DIRECTORY}


def is_temporary(name: str) -> bool:
    return name.startswith(TMP_PREFIX)


def is_rank_file(name: str) -> bool:
    """A rank's record or its answer to a stacks request (the request too)."""
    return bool(RANK_RECORD_NAME.match(name) or STACKS_ANSWER_NAME.match(name)) or name == STACKS_REQUEST


def kind_of(name: str) -> str | None:
    """The kind of a file name in a run directory (None: a temporary file, ignored)."""
    if is_temporary(name):
        return None
    if is_checkpoint_file(name):
        return CHECKPOINTS
    if is_rank_file(name):
        return RANKS
    return KNOWN_NAMES.get(name, DIRECTORY)


def is_known(name: str) -> bool:
    """A name the contract defines (or a temporary one): anything else is "other files"."""
    return name in KNOWN_NAMES or is_checkpoint_file(name) or is_temporary(name) or is_rank_file(name)


# -- history events (docs/contract.md#lossjson-the-history) ----------------------------------------
EVENT_START = "start"
EVENT_RESUME = "resume"
EVENT_CHECKPOINT = "checkpoint"
EVENT_CHECKPOINT_FAILED = "checkpoint_failed"
EVENT_WRITE_FAILED = "write_failed"
EVENT_SIGNAL = "signal"
EVENT_PIVOT = "pivot"
EVENT_ZOMBIE = "zombie"
EVENT_STOP = "stop"
STOP_ERROR = "error"                # a stop event's reason that starts with it: the trainer failed ("error: OSError")
STOP_NONFINITE = "nonfinite"        # a stop event's reason: a safety policy stopped a diverged run (trainer/train.py)
STOP_REQUEUE = "requeue"            # a stop event's reason: a framework saved and requeued its SLURM job (Lightning)
EVENT_PRUNE = "prune"
EVENT_ROLLBACK = "rollback"
# A held-out eval: eval_loss, per_arm, windows (trainer/evaluation.py writes it, rundir/history/evals.py reads it).
EVENT_EVAL = "eval"
# A checkpoint in another trainer's own format (a file or a directory: torch.save, a
# framework's, torch.distributed.checkpoint), recorded by the run API (rundir/run.py):
# step, path, size, optional checksum. Listed as "external", never resumed from by us.
EVENT_EXTERNAL_CHECKPOINT = "external_checkpoint"

# -- signals (docs/contract.md#signals-and-the-checkpoint-request) -----------------------------------------------
# What each signal means to a trainer. The console sends the first of each tuple.
CHECKPOINT_SIGNALS = (signal.SIGUSR1,)          # write a checkpoint and continue
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # write a checkpoint and exit 0
CHECKPOINT_SIGNAL = CHECKPOINT_SIGNALS[0]
# How a taken .checkpoint_request.json appears among the signals a trainer received (its
# `signal` event): a request to checkpoint, as a SIGUSR1 is.
CHECKPOINT_REQUESTED = "checkpoint request"
STOP_SIGNAL = STOP_SIGNALS[0]
