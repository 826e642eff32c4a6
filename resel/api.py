"""The small Python API: load a bag and sites, simulate, read the metrics.

Example::

    import resel
    bag = resel.load_bag("examples/gromacs-bag.toml")
    sites = resel.default_sites()
    result = resel.simulate(bag.resized(256), sites, "reselect", seed=1)
    print(result.metrics.ttc_wkd, result.metrics.tx_wkd, result.metrics.tq_wkd)

    exp = resel.run_experiment(bag, sites, ["random", "model", "reselect"], [64, 256], repeat=5)
    print(exp.change("reselect", "random", 256))   # % lower TTC_wkd than random
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from resel.config import load_bag, load_sites
from resel.domain import Bag, Site


def _data(name: str) -> Path:
    return Path(str(resources.files("resel") / "data" / name))


def default_sites_path() -> Path:
    """The embedded sites file modelled on the thesis (Bridges, Comet, SuperMIC, OSG)."""
    return _data("default-sites.toml")


def queue_sites_path() -> Path:
    """The embedded sites of resel's main job: three queues replaying HPC2N's real trace."""
    return _data("queue-sites.toml")


def default_bag_path() -> Path:
    """The embedded GROMACS-style bag (1,024 tasks of 10^5 steps)."""
    return _data("gromacs-bag.toml")


def default_sites() -> list[Site]:
    return load_sites(default_sites_path())


def default_bag() -> Bag:
    return load_bag(default_bag_path())
