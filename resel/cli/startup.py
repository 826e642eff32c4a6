"""What the ``resel`` command does before it parses anything, for its start-up time.

matplotlib became a dependency of resel (issue 28: figures are part of it), and with it numpy is
always installed. sqlite-utils imports numpy whenever it can, only to map numpy's number types
to column types (``sqlite_utils.db.COLUMN_TYPE_MAPPING``) — which resel never stores — and that
import was ~60 ms of every command opening a store for writing (``resel plan``, ``resel report``,
``resel model``...) on an installation that had no numpy before (docs/benchmarks.md, issue 28).
:class:`NumpyLeftOut` makes numpy unimportable *while sqlite_utils.db is first executed* and
only then, when numpy is not loaded already: sqlite-utils takes its ``ImportError`` branch, as
on an installation without numpy, and numpy imports as usual afterwards (matplotlib, when a
command draws). Installed by :func:`resel.cli.main` only: the Python API is left alone.
"""

from __future__ import annotations

import sys
from typing import Any


class NumpyLeftOut:
    """A ``sys.meta_path`` finder: while ``sqlite_utils.db`` executes, ``import numpy`` fails."""

    def __init__(self) -> None:
        self.loading = 0            # sqlite_utils.db is being executed (depth)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "numpy" and self.loading:
            raise ImportError("numpy is left out while sqlite-utils loads (resel: start-up, resel/cli/startup.py)")
        if name != "sqlite_utils.db" or "numpy" in sys.modules:
            return None
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Guarded(spec.loader, self)
        return spec


class _Guarded:
    """A loader that runs the real one with numpy left out (:class:`NumpyLeftOut`)."""

    def __init__(self, loader: Any, finder: NumpyLeftOut) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.finder.loading += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.finder.loading -= 1

    def __getattr__(self, name: str) -> Any:      # get_code, get_source, is_package...: the real loader's
        return getattr(self.loader, name)


def leave_numpy_out_of_sqlite_utils() -> None:
    """Install :class:`NumpyLeftOut` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, NumpyLeftOut) for f in sys.meta_path):
        sys.meta_path.insert(0, NumpyLeftOut())
