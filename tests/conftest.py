"""Shared fixtures: two hand-sized sites, a bag factory, and the embedded thesis data.

The two sites make every LIM number easy to compute by hand. With 1e10 instructions:

* ``hpc``  — clock 2.0 GHz, kappa 1, one pilot, never a re-selection target: T̂x = 5 s;
* ``pool`` — clock 1.0 GHz, kappa 1, one pilot per task, a re-selection target: T̂x = 10 s;

so Ŵ(pool, hpc) = 10 − 5 = 5 s. Sites are listed hpc first, so hpc is site index 0.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Callable

import pytest

from resel.config import load_bag, load_sites
from resel.domain import Bag, Clock, PilotPolicy, Profile, Site

REPO = Path(__file__).resolve().parent.parent
INSTRUCTIONS = 1e10


def make_site(name: str, clock_ghz: float, *, mode: str = "single", target: bool = False,
              cores: int = 64, kappa: float = 1.0, max_pilots: int | None = None,
              max_cores: int | None = None) -> Site:
    """A site built directly (no TOML), with no wait model: engine tests drive time by hand."""
    if max_pilots is None:
        max_pilots = 1 if mode == "single" else 64
    return Site(name=name, kind="simulated", cores=cores, clock=Clock(clock_ghz), kappa=kappa,
                pilot=PilotPolicy(mode=mode, max_cores=max_cores, max_pilots=max_pilots),
                reselect_target=target)


def make_bag(count: int, cores_per_task: int = 1, instructions: float = INSTRUCTIONS) -> Bag:
    return Bag("b", "run {index}", count, cores_per_task, Profile(instructions))


@pytest.fixture
def hpc() -> Site:
    """2.0 GHz, single pilot, not a target: T̂x = 5 s for 1e10 instructions."""
    return make_site("hpc", 2.0)


@pytest.fixture
def pool() -> Site:
    """1.0 GHz, per-task pilots, a re-selection target: T̂x = 10 s for 1e10 instructions."""
    return make_site("pool", 1.0, mode="per-task", target=True)


@pytest.fixture
def sites(hpc: Site, pool: Site) -> list[Site]:
    return [hpc, pool]


@pytest.fixture
def bag_of() -> Callable[..., Bag]:
    """Factory: ``bag_of(count, cores_per_task=1)`` with 1e10 instructions per task."""
    return make_bag


@pytest.fixture(scope="session")
def data_dir():
    """resel/data as installed (the embedded defaults)."""
    return resources.files("resel") / "data"


@pytest.fixture(scope="session")
def default_sites(data_dir) -> list[Site]:
    """The four thesis targets, loaded once (frozen sites; do not mutate the list)."""
    return load_sites(data_dir / "default-sites.toml")


@pytest.fixture(scope="session")
def gromacs_bag(data_dir) -> Bag:
    return load_bag(data_dir / "gromacs-bag.toml")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
