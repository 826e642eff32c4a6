"""resel: run bags of compute tasks across several sites and finish them sooner.

The public Python API (see resel/api.py for an example)::

    load_bag, load_sites, default_bag, default_sites   # configuration
    simulate, run_experiment                           # the offline simulator
    Engine, Strategy                                   # the pure engine and its strategies
    open_store                                         # the SQLite run store
    ReselError, InputError                             # errors worth catching
"""

from resel.api import default_bag, default_bag_path, default_sites, default_sites_path
from resel.backends.simulated import SimResult, simulate
from resel.config import load_bag, load_sites
from resel.engine import Engine
from resel.errors import InputError, ReselError
from resel.experiment import Experiment, run_experiment
from resel.selection import Strategy
from resel.store import open_store

__version__ = "0.1.0"

__all__ = [
    "Engine", "Experiment", "InputError", "ReselError", "SimResult", "Strategy", "default_bag",
    "default_bag_path", "default_sites", "default_sites_path", "load_bag", "load_sites",
    "open_store", "run_experiment", "simulate", "__version__",
]
