"""One torchrun worker for test_ddp's teardown test: ``trainer.cli.main`` in this process,
then the names of this process's threads before and after it, as ``OUT/rankN.json``.

The trainer's process group must be gone (its gloo threads joined) when ``main`` returns:
a gloo thread still alive while the interpreter finalizes can abort the process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def thread_names() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:
            continue                     # a thread that ended while listed
    return sorted(names)


if __name__ == "__main__":
    import torch  # noqa: F401  (its own threads, if any, count before and after alike)

    from trainer.cli import main

    out, argv = Path(sys.argv[1]), sys.argv[2:]
    before = thread_names()
    status = main(argv)
    after = thread_names()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps({"status": status, "before": before,
                                                                    "after": after}))
