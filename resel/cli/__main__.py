"""``python -m resel.cli``: the ``resel`` command, for a checkout or environment without the
console script on PATH (the live tests run it this way)."""

import sys

from resel.cli import main

sys.exit(main())
