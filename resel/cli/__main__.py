"""``python -m resel.cli``: the ``resel`` command, for a checkout or environment without the
console script on PATH (the live tests run it this way)."""

import sys

from resel.cli import main

if __name__ == "__main__":    # not when a spawned process (a Dask worker of --dask local) imports it again
    sys.exit(main())
