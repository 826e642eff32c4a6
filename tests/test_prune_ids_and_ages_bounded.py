"""`--since`, `--older-than` and `--run` take any text without a traceback or a hang (issue 24's
independent review: `runs --since 99999999999w` and `prune --run 1-99999999999999999999` raised
OverflowError, `prune --run 1-1000000000` built a billion ids before refusing them, and
`prune --run 1-1000000` was reported as a damaged store: too many SQL variables)."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.errors import ReselError
from resel.store_prune import moment, run_ids

SITES = ('[[site]]\nname="a"\nkind="simulated"\ncores=8\nclock={base=2.0}\n'
         'pilot={mode="single", walltime=3600}\nwait=60\n')
BAG = '[bag]\nname="b"\ncommand="true"\ncount=2\n[bag.profile]\ninstructions=4e9\n'


def test_an_age_older_than_the_calendar_is_before_any_run():
    assert moment("99999999999w").startswith("0001-01-01")


@pytest.mark.parametrize("text", ["1-99999999999999999999", "99999999999999999999", "1-1000000000"])
def test_run_ids_beyond_reason_are_refused_at_once(text):
    began = time.monotonic()
    with pytest.raises(ReselError):
        run_ids(text)
    assert time.monotonic() - began < 1


def test_a_million_ids_are_one_query(tmp_path):
    (tmp_path / "s.toml").write_text(SITES)
    (tmp_path / "b.toml").write_text(BAG)
    db = str(tmp_path / "r.db")
    assert CliRunner().invoke(cli, ["simulate", str(tmp_path / "b.toml"), "--sites", str(tmp_path / "s.toml"),
                                    "--sizes", "2", "--strategies", "model", "--repeat", "1", "--workers", "1",
                                    "--db", db]).exit_code == 0
    r = CliRunner().invoke(cli, ["prune", "--run", "1-1000000", "--dry-run", "--db", db])
    assert r.exit_code == 0 and "1 runs" in r.output, r.output
    r = CliRunner().invoke(cli, ["runs", "--since", "99999999999w", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
