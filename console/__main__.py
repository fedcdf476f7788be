"""``python -m console RUN_DIR ...``: the same as ``andrea-console``."""

import sys

from .cli import main

sys.exit(main())
