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

from hypothesis import settings as _hypothesis_settings

from resel.config import load_bag, load_sites
from resel.domain import Bag, Clock, PilotPolicy, Profile, Site

REPO = Path(__file__).resolve().parent.parent
INSTRUCTIONS = 1e10


def pytest_configure(config: pytest.Config) -> None:
    """GNU readline, which pytest's debugging plugin imports, exports COLUMNS=80 and LINES into
    the process's environment (not into ``os.environ``): every `resel` a test starts would lay
    its tables out for 80 columns, as resel honours COLUMNS. The commands tests start get the
    environment of a pipe instead, as a script's would; a test that wants a width says so."""
    import os
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
        os.unsetenv(name)


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


# ---------------------------------------------------------------- the live testbed
#
# The backend tests run against real daemons built by scripts/testbed.sh (two Slurm clusters,
# slurmrestd, an sshd; see tests/testbed.py). A testbed that is already up (its env file
# exists, e.g. brought up by scripts/test.sh) is used as it is and left running; otherwise the
# fixture brings one up and takes it down at the end of the session. The tests never skip for
# want of a testbed: if `up` fails, the fixture fails with the script's output.
#
# Several pytest sessions may share one testbed (developers running parts of the suite side by
# side). Each session holds a lease, a file named after its pid in $RESEL_TB/leases, while it
# uses the testbed; the session that brought the testbed up takes it down only when no other
# live session holds a lease, so it never pulls the daemons from under someone else's tests.

import os  # noqa: E402

# Property tests draw the same examples on every run of the test command ("gate"), so that CI
# judges the commit and not the luck of the draw: a random find in CI (stop 31's lscpu field ': ')
# failed a commit it said nothing about. To search for new counterexamples, run with
# RESEL_HYPOTHESIS=explore (random draws, saved in .hypothesis/); keep what it finds as @example.
_hypothesis_settings.register_profile("gate", derandomize=True, database=None)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(os.environ.get("RESEL_HYPOTHESIS", "gate"))
import subprocess  # noqa: E402

import testbed as _testbed  # noqa: E402  (tests/testbed.py; tests/ is on sys.path for conftest)

TESTBED_SCRIPT = REPO / "scripts" / "testbed.sh"


def _testbed_cmd(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(TESTBED_SCRIPT), *args], cwd=REPO, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _other_live_leases(leases: Path, mine: Path) -> list[Path]:
    others = []
    for lease in leases.glob("pytest-*"):
        if lease == mine:
            continue
        try:
            pid = int(lease.name.removeprefix("pytest-"))
        except ValueError:
            continue
        if _pid_alive(pid):
            others.append(lease)
        else:
            lease.unlink(missing_ok=True)   # a session that died without cleaning up
    return others


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the live testbed (``testbed`` anywhere in its fixtures) ``live``,
    so the test command can run the live half and the rest side by side (``-m live``,
    ``-m "not live"``; scripts/test.sh): the live tests mostly wait on schedulers, the rest
    mostly compute. Read from the fixtures, not from file names, so a new live test is never
    run beside the testbed's own users by mistake."""
    for item in items:
        if "testbed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def testbed():
    """The live testbed (a ``tests/testbed.py`` ``Testbed``), brought up for the session if needed."""
    leases = _testbed.env_path().parent / "leases"
    lease = leases / f"pytest-{os.getpid()}"
    tb = _testbed.load()
    brought_up = tb is None
    if brought_up:
        try:
            # two Debian roots built cold on a busy 2-core machine took up to ~9 min (README)
            up = _testbed_cmd("up", timeout=1200)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"scripts/testbed.sh up timed out:\n{exc.output or ''}", pytrace=False)
        if up.returncode != 0:
            pytest.fail(f"scripts/testbed.sh up failed ({up.returncode}):\n{up.stdout}",
                        pytrace=False)
        tb = _testbed.load()
        if tb is None:
            pytest.fail(f"scripts/testbed.sh up wrote no {_testbed.env_path()}:\n{up.stdout}",
                        pytrace=False)
    leases.mkdir(parents=True, exist_ok=True)
    lease.touch()
    try:
        yield tb
    finally:
        lease.unlink(missing_ok=True)
        if brought_up and not _other_live_leases(leases, lease):
            down = _testbed_cmd("down", timeout=300)
            if down.returncode != 0:
                print(f"scripts/testbed.sh down failed ({down.returncode}):\n{down.stdout}")


@pytest.fixture(scope="session")
def rest_token(testbed) -> str:
    """A JWT for ``testbed.rest_user``, for the headers X-SLURM-USER-NAME / X-SLURM-USER-TOKEN."""
    return Path(testbed.rest_token_file).read_text().strip()


@pytest.fixture(scope="session")
def bench_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store made by the start-up benchmark's own recipe (``benchmarks/bench_startup.py
    --make-inputs``): three simulated runs of 64 tasks and a live run (run 4, ``running``) with
    its recorded events — what ``resel runs`` and ``resel status`` are measured on."""
    import subprocess
    import sys
    db = tmp_path_factory.mktemp("bench-store") / "store.db"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_startup.py"), "--make-inputs", str(db)],
                   check=True, timeout=600)
    return db
