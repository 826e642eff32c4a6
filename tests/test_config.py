"""Tests of resel.config: good files load; every bad file gives one InputError naming file and key/line."""

from __future__ import annotations

import re

import pytest

from resel.config import load_bag, load_sites
from resel.errors import InputError

GOOD_BAG = """\
[bag]
name = "md"
command = "run {index}"
count = 4
cores_per_task = 1

[bag.profile]
instructions = 2.0e13
"""

GOOD_SITE = """\
[[site]]
name = "{name}"
kind = "simulated"
cores = 4
clock = {{ base = 2.0 }}
wait = {{ dist = "lognormal", median = 60, sigma = 0.5 }}
"""


def write(tmp_path, text, name="f.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def bad(loader, path) -> InputError:
    """Load, expecting exactly an InputError that names the file."""
    with pytest.raises(InputError) as info:
        loader(path)
    assert type(info.value) is InputError
    assert str(path) in str(info.value)
    assert info.value.path == str(path)
    return info.value


# ------------------------------------------------------------------ happy paths
def test_load_example_bag(repo):
    """examples/gromacs-bag.toml loads into the thesis's bag."""
    bag = load_bag(repo / "examples" / "gromacs-bag.toml")
    assert (bag.name, bag.count, bag.cores_per_task, bag.isa) == ("gromacs-1e5", 1024, 1, "x86")
    assert bag.profile.instructions == 2.0e13 and bag.profile.ipc == 2.2
    assert bag.command_for(7).endswith("-deffnm md7")


def test_load_default_sites(data_dir):
    """resel/data/default-sites.toml loads the four thesis targets with Table 4.1 clocks."""
    sites = load_sites(data_dir / "default-sites.toml")
    assert [s.name for s in sites] == ["bridges", "comet", "supermic", "osg"]
    assert [(s.clock.base, s.clock.avg) for s in sites] == [
        (2.30, 2.732), (2.50, 2.888), (2.80, 3.589), (2.50, 2.930)]
    assert [s.kappa for s in sites] == [1.0, 1.0, 1.0, 1.22]
    assert [s.reselect_target for s in sites] == [False, False, False, True]
    assert [s.pilot.mode for s in sites] == ["single"] * 3 + ["per-task"]
    assert [s.pilot.max_pilots for s in sites] == [1, 1, 1, 2000]
    assert all(s.wait is not None and s.truth is not None for s in sites)


def test_minimal_files_load(tmp_path):
    """A minimal bag and site file load, with defaults filled in."""
    bag = load_bag(write(tmp_path, GOOD_BAG, "bag.toml"))
    assert (bag.count, bag.profile.instructions, bag.profile.ipc) == (4, 2.0e13, None)
    (site,) = load_sites(write(tmp_path, GOOD_SITE.format(name="a"), "sites.toml"))
    assert (site.name, site.cores, site.kappa, site.pilot.mode, site.pilot.max_pilots) == ("a", 4, 1.0, "single", 1)
    assert site.reselect_target is True and site.truth is None


def test_examples_sites_identical_to_embedded(repo, data_dir):
    """examples/sites-thesis.toml is byte-identical to resel/data/default-sites.toml."""
    assert (repo / "examples" / "sites-thesis.toml").read_bytes() == (data_dir / "default-sites.toml").read_bytes()


def test_examples_bag_identical_to_embedded(repo, data_dir):
    """examples/gromacs-bag.toml is byte-identical to resel/data/gromacs-bag.toml."""
    assert (repo / "examples" / "gromacs-bag.toml").read_bytes() == (data_dir / "gromacs-bag.toml").read_bytes()


# ------------------------------------------------------------------ bad bags
def test_toml_syntax_error_names_line(tmp_path):
    """A TOML syntax error is an InputError with "line N" of the error."""
    path = write(tmp_path, GOOD_BAG.replace('count = 4', 'count 4'))
    err = bad(load_bag, path)
    assert "line 4" in str(err)
    assert "TOML" in str(err)


def test_unknown_bag_key_named_with_allowed_keys(tmp_path):
    """An unknown key is named, with its line, and the allowed keys are listed."""
    path = write(tmp_path, GOOD_BAG.replace('cores_per_task = 1', 'colour = "red"'))
    err = bad(load_bag, path)
    assert "'colour'" in str(err) and "line 5" in str(err)
    for key in ("name", "command", "count", "cores_per_task", "isa", "profile"):
        assert key in err.expected


def test_a_mistyped_key_gets_the_key_it_is_close_to(tmp_path):
    """A typo names the key meant; a key like no other gets no guess."""
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace('cores_per_task = 1', 'cores_per_tsak = 1')))
    assert "unknown key 'cores_per_tsak' (did you mean 'cores_per_task'?)" in str(err)
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace('cores_per_task = 1', 'colour = "red"')))
    assert "did you mean" not in str(err)


def test_negative_count(tmp_path):
    """count = -3 is rejected naming bag.count and what is expected."""
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace("count = 4", "count = -3")))
    assert "bag.count" in str(err) and "-3" in str(err) and "line 4" in str(err)
    assert "> 0" in err.expected


@pytest.mark.parametrize("value", ["0", "1.5", "true", '"four"'])
def test_bad_count_values(tmp_path, value):
    """count must be a whole number > 0."""
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace("count = 4", f"count = {value}")))
    assert "bag.count" in str(err)


def test_missing_instructions(tmp_path):
    """A profile without instructions names bag.profile and the missing key."""
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace("instructions = 2.0e13", "ipc = 2.0")))
    assert "bag.profile" in str(err) and "'instructions'" in str(err)


@pytest.mark.parametrize("value", ["0", "-1e9", "nan", "inf"])
def test_bad_instructions(tmp_path, value):
    """instructions must be a finite number > 0."""
    err = bad(load_bag, write(tmp_path, GOOD_BAG.replace("2.0e13", value)))
    assert "bag.profile.instructions" in str(err)


def test_missing_bag_table(tmp_path):
    """A file without [bag] says so."""
    err = bad(load_bag, write(tmp_path, 'name = "x"\n'))
    assert "[bag]" in str(err)


def test_missing_bag_file(tmp_path):
    """A missing file is an InputError naming it, not FileNotFoundError."""
    err = bad(load_bag, tmp_path / "nope.toml")
    assert "not found" in str(err)


def test_missing_sites_file(tmp_path):
    """A missing sites file is an InputError naming it."""
    bad(load_sites, tmp_path / "nope.toml")


def test_directory_instead_of_file(tmp_path):
    """A directory path is an InputError, not IsADirectoryError."""
    bad(load_bag, tmp_path)


def test_not_utf8(tmp_path):
    """Bytes that are not UTF-8 are an InputError."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[bag]\nname = "caf\xe9"\n')
    bad(load_bag, path)


# ------------------------------------------------------------------ bad sites
def test_unknown_site_kind(tmp_path):
    """kind = "lsf" (no backend) names the key and the allowed kinds."""
    path = write(tmp_path, GOOD_SITE.format(name="a").replace('"simulated"', '"lsf"'))
    err = bad(load_sites, path)
    assert "site[0].kind" in str(err) and "'lsf'" in str(err) and "line 3" in str(err)
    assert "simulated" in err.expected


def test_duplicate_site_name(tmp_path):
    """Two sites called "a" are rejected naming the duplicate."""
    path = write(tmp_path, GOOD_SITE.format(name="a") + "\n" + GOOD_SITE.format(name="a"))
    err = bad(load_sites, path)
    assert "'a'" in str(err) and "twice" in str(err) and "name" in str(err)


def test_bad_distribution_name(tmp_path):
    """dist = "gamma" names the key and lists the known distributions."""
    path = write(tmp_path, GOOD_SITE.format(name="a").replace('"lognormal"', '"gamma"'))
    err = bad(load_sites, path)
    assert "site[0].wait" in str(err) and "'gamma'" in str(err)
    assert "lognormal" in str(err) and "exponential" in str(err)


@pytest.mark.parametrize("wait, words", [
    ('{ median = 60, sigma = 0.5 }', ["dist"]),
    ('{ dist = "lognormal", median = 60 }', ["sigma"]),
    ('{ dist = "lognormal", median = 60, sigma = 0.5, mean = 3 }', ["mean"]),
    ('{ dist = "lognormal", median = -60, sigma = 0.5 }', ["median"]),
    ('{ dist = "uniform", low = 5, high = 1 }', ["low"]),
    ('{ dist = "empirical", samples = [] }', ["samples"]),
    ('{ dist = "lognormal", median = 60, sigma = 0.5, size_exponent = -1 }', ["size_exponent"]),
], ids=["no-dist", "missing-param", "unknown-param", "negative-median", "low>high", "no-samples",
        "negative-exponent"])
def test_bad_wait_tables(tmp_path, wait, words):
    """Malformed wait distributions are InputErrors naming the problem."""
    text = GOOD_SITE.format(name="a").replace('{ dist = "lognormal", median = 60, sigma = 0.5 }', wait)
    err = bad(load_sites, write(tmp_path, text))
    assert "site[0].wait" in str(err)
    for word in words:
        assert word in str(err)


def test_simulated_site_without_wait(tmp_path):
    """A simulated site needs a wait model."""
    text = "\n".join(l for l in GOOD_SITE.format(name="a").splitlines() if not l.startswith("wait"))
    err = bad(load_sites, write(tmp_path, text))
    assert "'wait'" in str(err)


def test_missing_site_cores(tmp_path):
    """A site without cores names site[0] and the missing key."""
    text = GOOD_SITE.format(name="a").replace("cores = 4\n", "")
    err = bad(load_sites, write(tmp_path, text))
    assert "site[0]" in str(err) and "'cores'" in str(err)


@pytest.mark.parametrize("old, new, key", [
    ("clock = { base = 2.0 }", "clock = { base = 0 }", "site[0].clock.base"),
    ("clock = { base = 2.0 }", "clock = { avg = 2.0 }", "site[0].clock"),
    ("clock = { base = 2.0 }", "clock = { base = 2.0, turbo = 3.0 }", "site[0].clock.turbo"),
    ("cores = 4", "cores = 4\npilot = { mode = \"many\" }", "site[0].pilot.mode"),
    ("cores = 4", "cores = 4\npilot = { max_pilots = 0 }", "site[0].pilot.max_pilots"),
    ("cores = 4", "cores = 4\nkappa = -1.22", "site[0].kappa"),
    ("cores = 4", "cores = 4\nreselect_target = \"yes\"", "site[0].reselect_target"),
    ("cores = 4", "cores = 4\ntruth = { speed = 2 }", "site[0].truth.speed"),
], ids=["clock-0", "no-base", "unknown-clock-key", "pilot-mode", "max-pilots-0", "kappa-neg",
        "reselect-str", "truth-key"])
def test_bad_site_values(tmp_path, old, new, key):
    """Bad site values name their key path."""
    err = bad(load_sites, write(tmp_path, GOOD_SITE.format(name="a").replace(old, new)))
    assert key in str(err)


def test_no_sites(tmp_path):
    """A file with no [[site]] tables says so."""
    err = bad(load_sites, write(tmp_path, "# nothing here\n"))
    assert "no sites" in str(err)


def test_unknown_top_level_key_in_sites(tmp_path):
    """A [bag] table in a sites file is named as unknown."""
    err = bad(load_sites, write(tmp_path, GOOD_SITE.format(name="a") + GOOD_BAG))
    assert "'bag'" in str(err)


def test_site_not_a_table(tmp_path):
    """site = [1, 2] is an InputError, not a TypeError."""
    bad(load_sites, write(tmp_path, "site = [1, 2]\n"))


# ------------------------------------------------------------------ bugs
def _two_sites_second_bad():
    first = GOOD_SITE.format(name="a")
    second = GOOD_SITE.format(name="b").replace("cores = 4", "cores = -4")
    return first + "\n" + second


def test_error_in_second_site_names_its_own_line(tmp_path):
    """A bad `cores` in the 2nd site (line 11) is reported at line 11, not the 1st site's line 4."""
    text = _two_sites_second_bad()
    assert text.splitlines()[10] == "cores = -4"
    err = bad(load_sites, write(tmp_path, text))
    assert "site[1].cores" in str(err)
    assert "line 11" in str(err)


def test_duplicate_site_name_points_at_duplicate(tmp_path):
    """Sites a, b, b: the error points at the second "b" (site[2], line 16), not at "a" (line 2)."""
    text = "\n".join(GOOD_SITE.format(name=n) for n in ("a", "b", "b"))
    assert text.splitlines()[15] == 'name = "b"'
    err = bad(load_sites, write(tmp_path, text))
    assert "line 16" in str(err)


@pytest.mark.parametrize("truth", [
    "truth = { clock = 0 }",
    "truth = { clock = nan }",
    "truth = { ipc = -1 }",
    'truth = { ipc = { dist = "fixed", value = -3 } }',
], ids=["clock-0", "clock-nan", "ipc-neg", "ipc-fixed-neg"])
def test_nonsense_truth_values_rejected(tmp_path, truth):
    """A zero/NaN clock or a negative IPC in a site's truth is an InputError."""
    bad(load_sites, write(tmp_path, GOOD_SITE.format(name="a") + truth + "\n"))


def test_error_message_has_single_location_prefix(tmp_path):
    """The message reads "<file>: <key> (line N): <problem> (expected ...)"."""
    path = write(tmp_path, GOOD_BAG.replace("count = 4", "count = -3"))
    err = bad(load_bag, path)
    assert re.fullmatch(rf"{re.escape(str(path))}: bag\.count \(line 4\): bad value -3 \(expected .+\)", str(err))


# ------------------------------------------------------------------ live sites (access tables)
LIVE_SITE = """\
[[site]]
name = "hpc"
kind = "slurm"
cores = 8
clock = {{ base = 2.0 }}
access = {{ {access} }}
"""


def test_live_site_access_table_loads_with_paths_relative_to_the_file(tmp_path):
    path = write(tmp_path, LIVE_SITE.format(access='transport = "ssh", host = "login1", ssh_config = "ssh/config", '
                                            'workdir = "~/w", env = { SLURM_CONF = "/etc/slurm/b.conf" }, '
                                            'partition = "debug", submit_args = ["--mem=1G"]'))
    (site,) = load_sites(path)
    acc = site.access
    assert (acc.transport.kind, acc.transport.host, acc.workdir, acc.scheduler.partition) == ("ssh", "login1", "~/w", "debug")
    assert acc.transport.ssh_config == str(tmp_path / "ssh" / "config")
    assert acc.env == {"SLURM_CONF": "/etc/slurm/b.conf"} and acc.scheduler.sbatch_options == ("--mem=1G",)
    assert acc.transport.table()["host"] == "login1"


def test_example_testbed_sites_load(repo):
    sites = load_sites(repo / "examples" / "sites-testbed.toml")
    assert [(s.name, s.kind, s.access.transport.kind) for s in sites] == [("tba", "slurm", "local"), ("tbb", "slurm", "ssh")]


def test_live_site_without_access_is_refused(tmp_path):
    path = write(tmp_path, '[[site]]\nname = "hpc"\nkind = "slurm"\ncores = 8\nclock = { base = 2.0 }\n')
    err = bad(load_sites, path)
    assert "access" in str(err)


def test_ssh_access_without_host_is_refused(tmp_path):
    err = bad(load_sites, write(tmp_path, LIVE_SITE.format(access='transport = "ssh", workdir = "~/w"')))
    assert "host" in str(err) and "line 6" in str(err)


def test_hostile_partition_name_is_refused(tmp_path):
    err = bad(load_sites, write(tmp_path, LIVE_SITE.format(access='workdir = "/w", partition = "debug; rm -rf ~"')))
    assert "partition" in str(err)


def test_bad_env_name_is_refused(tmp_path):
    err = bad(load_sites, write(tmp_path, LIVE_SITE.format(access='workdir = "/w", env = { "A B" = "x" }')))
    assert "env" in str(err)


def test_access_on_a_simulated_site_is_refused(tmp_path):
    text = GOOD_SITE.format(name="a") + 'access = { workdir = "/w" }\n'
    err = bad(load_sites, write(tmp_path, text))
    assert "only live sites" in str(err)


def test_pbs_and_htcondor_access_tables(tmp_path):
    text = (LIVE_SITE.format(access='workdir = "/w", queue = "workq", dialect = "torque"').replace('"slurm"', '"pbs"')
            + LIVE_SITE.format(access='transport = "ssh", host = "ap40", workdir = "~/w", project = "OSG-Staff"')
            .replace('"slurm"', '"htcondor"').replace('name = "hpc"', 'name = "osg"'))
    pbs, osg = load_sites(write(tmp_path, text))
    assert (pbs.kind, pbs.access.scheduler.queue, pbs.access.scheduler.dialect, pbs.access.api) == ("pbs", "workq", "torque", "cli")
    assert (osg.kind, osg.access.scheduler.project, osg.access.api) == ("htcondor", "OSG-Staff", "cli")


@pytest.mark.parametrize("kind, key", [
    ("pbs", 'qos = "high"'), ("htcondor", 'qos = "high"'), ("pbs", 'rest_user = "me"'),
    ("htcondor", 'partition = "debug"'), ("htcondor", 'queue = "workq"'), ("htcondor", 'account = "proj"'),
    ("slurm", 'dialect = "pro"'), ("pbs", 'project = "OSG-Staff"'),
])
def test_a_key_the_sites_scheduler_would_ignore_is_refused(tmp_path, kind, key):
    """Each kind of scheduler has its own options record: a key another kind's record holds would
    be dropped silently, so the file is refused at that key, with its line."""
    text = LIVE_SITE.format(access=f'workdir = "/w", {key}').replace('"slurm"', f'"{kind}"')
    err = bad(load_sites, write(tmp_path, text))
    name = key.split(" =")[0]
    assert f"site[0].access.{name}" in str(err) and "line " in str(err), str(err)


def test_api_must_fit_the_kind(tmp_path):
    text = LIVE_SITE.format(access='workdir = "/w", api = "rest"').replace('"slurm"', '"pbs"')
    err = bad(load_sites, write(tmp_path, text))
    assert "api" in str(err) and "pbs" in str(err)
