"""``python -m trainer RUN_DIR ...``: the same as ``andrea-train``."""

import sys

from trainer.entry import main

sys.exit(main())
