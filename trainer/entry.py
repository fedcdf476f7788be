"""``andrea-train``'s entry point: says how to install PyTorch when it is missing.

The console and the run-directory library install without torch (``pip install .`` in a
checkout); the trainer needs it (``pip install '.[train]'``; the project is not published
on a package index, so the command names the checkout, not a package name). This
module imports nothing heavy, so the check costs nothing when torch is there, and
``--help`` and ``--prune`` (:mod:`trainer.prune`) work without it.
"""

from __future__ import annotations

import importlib.util
import sys

EXIT_USAGE = 2
INSTALL_HINT = ("andrea-train: PyTorch is not installed; install the trainer's extra from the andrea-console "
                "checkout with pip install '.[train]' there (or pip install torch, with the build for your machine)")


def torch_installed() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    from trainer.args import build_parser

    args = build_parser().parse_args(argv)          # --help and bad flags need no torch either
    if args.prune:
        from trainer.prune import run_prune

        return run_prune(args)
    if not torch_installed():
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USAGE
    from trainer.cli import main as train_main

    return train_main(argv)


if __name__ == "__main__":
    sys.exit(main())
