"""resel: run bags of compute tasks across several sites and finish them sooner.

The public Python API (see resel/api.py for an example)::

    load_bag, load_sites, default_bag, default_sites   # configuration
    simulate, run_experiment                           # the offline simulator
    Engine, Strategy                                   # the pure engine and its strategies
    open_store                                         # the SQLite run store
    ReselError, InputError                             # errors worth catching

The names are loaded on first use (PEP 562 ``__getattr__``), not when the package is
imported: ``import resel.engine`` must cost the engine and the standard library only, and the
command line must not pay for the store, sqlite_utils or the simulator in a command that does
not use them (docs/benchmarks.md, "Start-up").
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name -> the module that defines it (imported the first time the name is read)
_LAZY = {
    "default_bag": "resel.api",
    "default_bag_path": "resel.api",
    "default_sites": "resel.api",
    "default_sites_path": "resel.api",
    "queue_sites_path": "resel.api",
    "SimResult": "resel.sim.simulation",
    "simulate": "resel.sim.simulation",
    "load_bag": "resel.config",
    "load_sites": "resel.config",
    "Engine": "resel.engine",
    "InputError": "resel.errors",
    "ReselError": "resel.errors",
    "Experiment": "resel.sim.experiment",
    "run_experiment": "resel.sim.experiment",
    "Strategy": "resel.selection",
    "open_store": "resel.store",
}

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # what type checkers and IDEs see; nothing is imported at run time
    from resel.api import default_bag, default_bag_path, default_sites, default_sites_path, queue_sites_path
    from resel.sim.simulation import SimResult, simulate
    from resel.config import load_bag, load_sites
    from resel.engine import Engine
    from resel.errors import InputError, ReselError
    from resel.sim.experiment import Experiment, run_experiment
    from resel.selection import Strategy
    from resel.store import open_store


def __getattr__(name: str) -> object:
    """Import the module that defines a public name the first time the name is read.

    A submodule read as an attribute (``resel.store`` after a bare ``import resel``) is imported
    too, as it was when this package imported them all at once.
    """
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(_import_module(module), name)
    elif name.isidentifier() and not name.startswith("__"):
        try:
            value = _import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'resel' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'resel' has no attribute {name!r}")
    globals()[name] = value  # cached: the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__version__"})
