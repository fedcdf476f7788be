"""``andrea-train``'s command line, torch-free: ``--help`` and ``--prune`` need no torch."""

from __future__ import annotations

import argparse
from typing import NoReturn

from rundir.config import PRECISIONS, PRESETS

PROG = "andrea-train"
DEFAULT_PRESET = "tiny"
# Flags that override run.toml's [run] section for this process (recorded in the
# start/resume event, never written back to an existing run.toml).
RUN_FLAGS = ("max_steps", "checkpoint_every", "eval_every", "sample_every", "device", "seed", "keep_last", "keep_every",
             "precision", "compile")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:      # one line, not usage + message
        self.exit(2, f"{PROG}: {message} (see --help)\n")


def _integer(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is not >= {minimum}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Train a small GPT on a run directory; resumes from its newest checkpoint.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (created with a run.toml if new)")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help=f"model preset for a new run.toml (default {DEFAULT_PRESET}); must match an existing one")
    p.add_argument("--max-steps", type=_integer(0), metavar="N",
                   help="the step to stop at, counted from the run's start (0: until stopped)")
    p.add_argument("--checkpoint-every", type=_integer(1), metavar="N",
                   help="checkpoint cadence in steps (also sets --sample-every unless given)")
    p.add_argument("--eval-every", type=_integer(0), metavar="N",
                   help="held-out eval loss cadence in steps (run.eval_every; default: the checkpoint cadence; "
                        "0: off)")
    p.add_argument("--sample-every", type=_integer(1), metavar="N", help="sample-audit cadence in steps")
    p.add_argument("--device", metavar="auto|cpu|cuda", help="where to train (auto: cuda when available)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="arithmetic of the forward and loss: bf16 autocast (float32 weights, m and v) or fp32; "
                        "auto (run.toml's default): bf16 on a CUDA GPU that has it, else fp32")
    p.add_argument("--force-precision", action="store_true",
                   help="resume a checkpoint trained in another precision (refused without it: the resume is "
                        "then not exact, and the resume event says so)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model for training (run.compile; --no-compile turns it off)")
    p.add_argument("--resume", default="latest", metavar="latest|PATH|none",
                   help="latest (default): the newest complete checkpoint; PATH: that step_NNNNNN.bin; "
                        "none: start fresh (refused when checkpoints exist)")
    p.add_argument("--fresh-bandit", action="store_true",
                   help="resume everything but start the bandit fresh under run.toml's caps and floors")
    p.add_argument("--skip-batches", type=_integer(0), default=0, metavar="N",
                   help="with a resume: each arm's sampler skips the windows of its next N batches (a rollback "
                        "past a loss spike); the resume event records N")
    p.add_argument("--seed", type=_integer(0), metavar="N", help="seed of a fresh run (default 7)")
    p.add_argument("--threads", type=_integer(1), default=1, metavar="N",
                   help="torch CPU threads (default 1; a resume is bit-exact with the same count)")
    p.add_argument("--keep-last", type=_integer(0), metavar="N",
                   help="retention: keep the newest N complete checkpoints "
                        "(0: all; run.toml's run.keep_last, default 5)")
    p.add_argument("--keep-every", type=_integer(0), metavar="N",
                   help="retention: also keep every checkpoint whose step is a multiple of N (0: none)")
    p.add_argument("--prune", action="store_true",
                   help="apply the retention policy to RUN_DIR now, with no trainer running, printing each "
                        "checkpoint kept or removed and why; no training (needs no torch)")
    p.add_argument("--dry-run", action="store_true", help="with --prune: print what would be removed, remove nothing")
    p.add_argument("--nproc", type=_integer(1), default=1, metavar="N",
                   help="train with N processes on this machine (DDP; one per GPU): this process becomes "
                        "their launcher (torchrun's agent) and passes SIGTERM, SIGINT and SIGUSR1 on")
    p.add_argument("--nnodes", metavar="M", help="with --nproc: M machines, each running the same command "
                                                 "(c10d rendezvous at --rdzv-endpoint)")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="with --nnodes: where the launchers meet")
    p.add_argument("--rdzv-id", metavar="ID", help="with --nnodes: the job's rendezvous id (e.g. the SLURM job id)")
    p.add_argument("--local-addr", metavar="ADDR", help="with --nnodes: the address the other nodes reach this one at "
                                                        "(default: this host's name)")
    return p
