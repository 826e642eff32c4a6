#!/usr/bin/env python3
"""An independent hostile-input harness for the resel CLI (issue 24's re-run).

Builds ~600 cases across every subcommand — malformed and hostile bags, sites files, SWF
traces, damaged run stores, bad option values — runs each as its own subprocess (sequentially,
10 s timeout each) in a private scratch folder, and classifies every outcome:

* ``traceback``  a Python traceback on stdout or stderr;
* ``hang``       no exit within the timeout;
* ``wrong0``     exit status 0 on input that must be refused;
* ``badcode``    an exit status >= 2 that is not click's usage error (2 with ``Usage:``), or a signal;
* ``canary``     a file that only a shell running a hostile string would create appeared;
* ``escape``     a file appeared outside the case's folder where a hostile path pointed.

Cost: groups of cases that grow one input (``scale``) are timed at two sizes and the ratio of
their times is reported (linear work: about the ratio of the sizes, or less).

    .venv/bin/python benchmarks/review_hostile.py            # table
    .venv/bin/python benchmarks/review_hostile.py --json     # one JSON document
    .venv/bin/python benchmarks/review_hostile.py --only store --verbose

Also: ``--make-live-store DB --workdir W --results R`` writes a store holding one finished
live run of a local-transport site whose two tasks' outputs are in W (for ``resel results``,
``resel fetch`` and the second-user checks), without any scheduler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESEL = str(Path(sys.executable).with_name("resel"))
TIMEOUT = 10.0
EX = ROOT / "examples"


@dataclass
class Case:
    name: str
    group: str
    argv: list[str]
    expect: str = "fail"           # fail: must exit non-zero; ok: must exit 0; any
    stdin: bytes | None = None
    scale: tuple[str, float] | None = None   # (series, size)
    watch: list[str] = field(default_factory=list)  # paths that must not appear


@dataclass
class Outcome:
    case: Case
    rc: int | None
    seconds: float
    problems: list[str]
    tail: str


# ---------------------------------------------------------------- inputs
SIMPLE_SITE = """
[[site]]
name = "{name}"
kind = "simulated"
cores = {cores}
clock = {{ base = {clock} }}
pilot = {{ mode = "single", walltime = 3600 }}
wait = 60
"""

GOOD_BAG = '[bag]\nname = "b"\ncommand = "true"\ncount = 4\n\n[bag.profile]\ninstructions = 4e9\n'


def bag(body: str, profile: str = "[bag.profile]\ninstructions = 4e9\n") -> str:
    return "[bag]\n" + body + "\n\n" + profile


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    path.write_bytes(data)
    return path


def bag_variants(ws: Path) -> list[tuple[str, str | bytes, str]]:
    """(name, file content, expect) — expect: fail/ok/any."""
    canary = ws / "CANARY-bag"
    out = []
    add = lambda n, c, e="fail": out.append((n, c, e))  # noqa: E731
    add("empty", "")
    add("not-toml", "[bag\nname=")
    add("nul-byte", '[bag]\nname = "a\x00b"\ncommand = "true"\ncount = 2\n')
    add("non-utf8", b'[bag]\nname = "\xff\xfe"\ncommand = "true"\ncount = 2\n[bag.profile]\ninstructions=1e9\n')
    add("bom", "\ufeff" + GOOD_BAG, "any")
    add("no-bag-table", 'name = "x"\n')
    add("bag-is-string", 'bag = "x"\n')
    add("bag-is-array", "bag = [1,2]\n")
    add("count-zero", bag('name="a"\ncommand="true"\ncount=0'))
    add("count-negative", bag('name="a"\ncommand="true"\ncount=-5'))
    add("count-float", bag('name="a"\ncommand="true"\ncount=2.5'))
    add("count-nan", bag('name="a"\ncommand="true"\ncount=nan'))
    add("count-inf", bag('name="a"\ncommand="true"\ncount=inf'))
    add("count-huge", bag('name="a"\ncommand="true"\ncount=9223372036854775807'))
    add("count-1e18", bag('name="a"\ncommand="true"\ncount=1000000000000000000'))
    add("count-string", bag('name="a"\ncommand="true"\ncount="4"'))
    add("count-bool", bag('name="a"\ncommand="true"\ncount=true'))
    add("cores-zero", bag('name="a"\ncommand="true"\ncount=2\ncores_per_task=0'))
    add("cores-huge", bag('name="a"\ncommand="true"\ncount=2\ncores_per_task=99999999999'))
    add("cmd-empty", bag('name="a"\ncommand=""\ncount=2'))
    add("cmd-int", bag('name="a"\ncommand=5\ncount=2'))
    add("cmd-huge", bag('name="a"\ncommand="' + "x" * 200_000 + '"\ncount=2'))
    add("cmd-shellmeta", bag(f'name="a"\ncommand="true; touch {canary}; $(touch {canary})"\ncount=2'), "any")
    add("name-control", bag('name="a\\u001b[31mred"\ncommand="true"\ncount=2'))
    add("name-empty", bag('name=""\ncommand="true"\ncount=2'))
    add("name-rich-markup", bag('name="[bold red]x[/] [link=file:///etc/passwd]y[/link]"\ncommand="true"\ncount=2'), "any")
    add("missing-command", bag('name="a"\ncount=2'))
    add("missing-profile", '[bag]\nname="a"\ncommand="true"\ncount=2\n')
    add("profile-nan", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = nan\n"))
    add("profile-inf", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = inf\n"))
    add("profile-neg", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = -1e9\n"))
    add("profile-zero", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = 0\n"))
    add("profile-1e309", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = 1e308\nipc=1e308\n"))
    add("profile-ipc-nan", bag('name="a"\ncommand="true"\ncount=2', "[bag.profile]\ninstructions = 1e9\nipc=nan\n"))
    add("profile-string", bag('name="a"\ncommand="true"\ncount=2', '[bag.profile]\ninstructions = "many"\n'))
    add("unknown-key", bag('name="a"\ncommand="true"\ncount=2\nbogus=1'))
    add("deep-nesting", "[bag]\nname='a'\ncommand='true'\ncount=2\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    add("deep-inline", "[bag]\nname='a'\ncommand='true'\ncount=2\nx = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n")
    add("placeholder-unknown", bag('name="a"\ncommand="echo {nope}"\ncount=2'), "any")
    add("placeholder-format-attack", bag('name="a"\ncommand="echo {index.__class__.__mro__}"\ncount=2'), "any")
    add("placeholder-width-huge", bag('name="a"\ncommand="echo {index:999999999d}"\ncount=2'), "any")
    add("placeholder-unbalanced", bag('name="a"\ncommand="echo {index"\ncount=2'), "any")
    add("inputs-dotdot", bag('name="a"\ncommand="true"\ncount=2\ninputs=["../../../../etc/shadow"]'))
    add("inputs-abs-missing", bag('name="a"\ncommand="true"\ncount=2\ninputs=["/nonexistent/x"]'))
    add("inputs-abs-etc-shadow", bag('name="a"\ncommand="true"\ncount=2\ninputs=["/etc/shadow"]'), "any")
    add("inputs-glob-dotdot", bag('name="a"\ncommand="true"\ncount=2\ninputs=["../**/*.py"]'), "any")
    add("inputs-as-dotdot", bag('name="a"\ncommand="true"\ncount=2\ninputs=[{path="in.txt", as="../x"}]'))
    add("inputs-as-abs", bag('name="a"\ncommand="true"\ncount=2\ninputs=[{path="in.txt", as="/tmp/x"}]'))
    add("inputs-as-slash", bag('name="a"\ncommand="true"\ncount=2\ninputs=[{path="in.txt", as="a/b"}]'), "any")
    add("inputs-dup-names", bag('name="a"\ncommand="true"\ncount=2\ninputs=["in.txt", {path="in.txt", as="in.txt"}]'))
    add("inputs-not-list", bag('name="a"\ncommand="true"\ncount=2\ninputs="in.txt"'))
    add("inputs-int", bag('name="a"\ncommand="true"\ncount=2\ninputs=[1]'))
    add("inputs-empty-string", bag('name="a"\ncommand="true"\ncount=2\ninputs=[""]'))
    add("inputs-nul", bag('name="a"\ncommand="true"\ncount=2\ninputs=["in\\u0000.txt"]'))
    add("inputs-link", bag('name="a"\ncommand="true"\ncount=2\ninputs=["link-to-shadow"]'), "any")
    add("inputs-fifo", bag('name="a"\ncommand="true"\ncount=2\ninputs=["fifo"]'))
    add("inputs-dir", bag('name="a"\ncommand="true"\ncount=2\ninputs=["somedir"]'))
    add("inputs-index", bag('name="a"\ncommand="true"\ncount=2\ninputs=["in-{index}.txt"]'))
    add("inputs-many", bag('name="a"\ncommand="true"\ncount=2\ninputs=[' + ",".join('"in.txt"' for _ in range(1500)) + "]"))
    add("inputs-long-pattern", bag('name="a"\ncommand="true"\ncount=2\ninputs=["' + "a" * 10000 + '"]'))
    add("inputs-url-bad", bag('name="a"\ncommand="true"\ncount=2\ninputs=["https://x/a b,c"]'))
    add("inputs-url-index", bag('name="a"\ncommand="true"\ncount=2\ninputs=["https://x/{index}.txt"]'))
    add("inputs-url-ok", bag('name="a"\ncommand="true"\ncount=2\ninputs=["https://example.org/a.txt"]\noutputs=["o"]'), "any")
    add("outputs-dotdot", bag('name="a"\ncommand="true"\ncount=2\noutputs=["../x"]'))
    add("outputs-abs", bag('name="a"\ncommand="true"\ncount=2\noutputs=["/etc/passwd"]'))
    add("outputs-backslash", bag('name="a"\ncommand="true"\ncount=2\noutputs=["a\\\\..\\\\b"]'))
    add("outputs-empty-part", bag('name="a"\ncommand="true"\ncount=2\noutputs=["a//b"]'))
    add("outputs-glob-dotdot", bag('name="a"\ncommand="true"\ncount=2\noutputs=["**/../../x"]'))
    add("outputs-dot", bag('name="a"\ncommand="true"\ncount=2\noutputs=["./x"]'))
    add("outputs-nul", bag('name="a"\ncommand="true"\ncount=2\noutputs=["x\\u0000y"]'))
    add("outputs-optional-str", bag('name="a"\ncommand="true"\ncount=2\noutputs=[{glob="x", optional="yes"}]'))
    add("outputs-table-noglob", bag('name="a"\ncommand="true"\ncount=2\noutputs=[{optional=true}]'))
    add("outputs-many", bag('name="a"\ncommand="true"\ncount=2\noutputs=[' + ",".join(f'"o{i}"' for i in range(1500)) + "]"))
    add("results-empty", bag('name="a"\ncommand="true"\ncount=2\noutputs=["o"]\nresults=""'))
    add("data-nan", bag('name="a"\ncommand="true"\ncount=2\n[bag.data]\noutput_mb=nan'))
    add("data-inf", bag('name="a"\ncommand="true"\ncount=2\n[bag.data]\ninput_mb=inf'))
    add("data-neg", bag('name="a"\ncommand="true"\ncount=2\n[bag.data]\nshared_mb=-1'))
    add("data-huge", bag('name="a"\ncommand="true"\ncount=2\n[bag.data]\nshared_mb=1e300'))
    add("site-commands-bad", bag('name="a"\ncommand="true"\ncount=2\nsite_commands={x=""}'))
    add("site-commands-unknown-site", bag('name="a"\ncommand="true"\ncount=2\nsite_commands={nosuch="true"}'), "any")
    add("perf-every-neg", bag('name="a"\ncommand="true"\ncount=2\nperf_every=-1'))
    add("big-file", bag('name="a"\ncommand="true"\ncount=2') + "# " + "x" * (5 * 1024 * 1024) + "\n")
    add("many-keys", "[bag]\nname='a'\ncommand='true'\ncount=2\n" + "".join(f"k{i}={i}\n" for i in range(50000)))
    add("dup-key", "[bag]\nname='a'\nname='b'\ncommand='true'\ncount=2\n")
    add("ok-plain", GOOD_BAG, "ok")
    return out


SIM_SITES = (SIMPLE_SITE.format(name="a", cores=16, clock=2.0) + SIMPLE_SITE.format(name="b", cores=8, clock=3.0))


def site_variants(ws: Path) -> list[tuple[str, str | bytes, str]]:
    canary = ws / "CANARY-sites"
    out = []
    add = lambda n, c, e="fail": out.append((n, c, e))  # noqa: E731
    base = 'name="x"\nkind="simulated"\ncores=8\nclock={base=2.0}\npilot={mode="single", walltime=3600}\nwait=60\n'
    live = ('name="l"\nkind="slurm"\ncores=8\nclock={base=2.0}\npilot={mode="single", walltime=3600}\n'
            '[site.access]\ntransport="local"\nworkdir="%s"\n' % (ws / "work"))

    def site(extra: str = "", b: str = base) -> str:
        return "[[site]]\n" + b + extra + "\n"

    add("empty", "")
    add("no-sites", 'x = 1\n')
    add("site-not-array", 'site = "x"\n')
    add("nul", "[[site]]\nname='a\x00'\n")
    add("non-utf8", b"[[site]]\nname='\xff'\n")
    add("cores-zero", site(b=base.replace("cores=8", "cores=0")))
    add("cores-neg", site(b=base.replace("cores=8", "cores=-1")))
    add("cores-huge", site(b=base.replace("cores=8", "cores=99999999999999")))
    add("cores-float", site(b=base.replace("cores=8", "cores=8.5")))
    add("cores-nan", site(b=base.replace("cores=8", "cores=nan")))
    add("clock-nan", site(b=base.replace("base=2.0", "base=nan")))
    add("clock-inf", site(b=base.replace("base=2.0", "base=inf")))
    add("clock-zero", site(b=base.replace("base=2.0", "base=0")))
    add("clock-neg", site(b=base.replace("base=2.0", "base=-2")))
    add("clock-1e308", site(b=base.replace("base=2.0", "base=1e308")))
    add("clock-string", site(b=base.replace("base=2.0", 'base="fast"')))
    add("clock-not-table", site(b=base.replace("clock={base=2.0}", "clock=2")))
    add("walltime-nan", site(b=base.replace("walltime=3600", "walltime=nan")))
    add("walltime-neg", site(b=base.replace("walltime=3600", "walltime=-1")))
    add("walltime-huge", site(b=base.replace("walltime=3600", "walltime=1e300")))
    add("pilot-mode-bad", site(b=base.replace('"single"', '"quantum"')))
    add("wait-nan", site(b=base.replace("wait=60", "wait=nan")))
    add("wait-neg", site(b=base.replace("wait=60", "wait=-60")))
    add("wait-dist-bad", site(b=base.replace("wait=60", 'wait={dist="cauchy", median=1}')))
    add("wait-lognormal-sigma-nan", site(b=base.replace("wait=60", 'wait={dist="lognormal", median=10, sigma=nan}')))
    add("wait-lognormal-sigma-huge", site(b=base.replace("wait=60", 'wait={dist="lognormal", median=10, sigma=1e300}')))
    add("kappa-nan", site("kappa=nan"))
    add("kappa-zero", site("kappa=0"))
    add("bandwidth-zero", site("bandwidth=0"))
    add("bandwidth-nan", site("bandwidth=nan"))
    add("bandwidth-table-bad", site('bandwidth={in="x", out=1}'))
    add("truth-ipc-nan", site("truth={ipc=nan}"))
    add("truth-clock-neg", site('truth={clock={dist="normal", mean=-1, std=0.1}}'))
    add("kind-bad", site(b=base.replace('"simulated"', '"kubernetes"')))
    add("name-control", site(b=base.replace('name="x"', 'name="x\\u001b]0;pwn\\u0007"')))
    add("name-dup", site() + site())
    add("unknown-key", site("frobnicate=1"))
    add("notes-markup", site('notes="[red]x[/red][link=http://evil]y[/link]"'), "ok")
    add("deep", "[[site]]\nname='x'\nx=" + "[" * 5000 + "]" * 5000 + "\n")
    add("many-sites", "".join(site(b=base.replace('name="x"', f'name="s{i}"')) for i in range(3000)), "any")
    # live sites: hostile strings in access; they must be refused or kept as data (never a shell)
    add("live-ok", site(b=live), "ok")
    add("live-transport-bad", site(b=live.replace('"local"', '"telnet"')))
    add("live-workdir-empty", site(b=live.replace(f'workdir="{ws / "work"}"', 'workdir=""')))
    add("live-workdir-meta", site(b=live.replace(f'workdir="{ws / "work"}"', f'workdir="/tmp/$(touch {canary})"')), "any")
    add("live-workdir-newline", site(b=live.replace(f'workdir="{ws / "work"}"', 'workdir="/tmp/a\\nb"')), "any")
    add("live-env-key-bad", site("env={\"A B\"=\"1\"}", b=live))
    add("live-env-key-meta", site('env={"X;touch /tmp/p"="1"}', b=live))
    add("live-env-value-meta", site(f'env={{X="$(touch {canary})`touch {canary}`"}}', b=live), "any")
    add("live-env-ld-preload", site('env={LD_PRELOAD="/tmp/evil.so"}', b=live), "any")
    add("live-env-not-str", site("env={X=1}", b=live))
    add("live-python-meta", site(f'python="python3; touch {canary}"', b=live), "any")
    add("live-partition-meta", site('partition="a;b"', b=live))
    add("live-account-meta", site('account="$(id)"', b=live))
    add("live-port-bad", site("port=70000", b=live.replace('"local"', '"ssh"') + 'host="h"\n'))
    add("live-ssh-nohost", site("", b=live.replace('"local"', '"ssh"')))
    # a host is a name paramiko looks up, never a word on a command line: kept as data; the canary
    # says whether anything ran it
    add("live-host-meta", site(f'host="-oProxyCommand=touch {canary}"', b=live.replace('"local"', '"ssh"')), "any")
    add("live-user-meta", site('user="a b"', b=live.replace('"local"', '"ssh"') + 'host="h"\n'))
    add("live-ssh-config-proxy", site(f'ssh_config="{ws / "sshcfg-proxy"}"', b=live.replace('"local"', '"ssh"') + 'host="h"\n'), "any")
    add("live-ssh-config-matchexec", site(f'ssh_config="{ws / "sshcfg-match"}"', b=live.replace('"local"', '"ssh"') + 'host="h"\n'), "any")
    # sbatch options, parsed as sbatch would
    for i, opts in enumerate([
        '["--output=/tmp/x"]', '["-o", "/tmp/x"]', '["-o/tmp/x"]', '["-vo/tmp/x"]', '["-e/tmp/x"]',
        '["--error", "/tmp/x"]', '["--wrap=id"]', '["--wrap", "id"]', '["extra-positional"]', '["--", "x"]',
        '["-J"]', '["--chdir=/"]', '["-D/"]', '["-vD/"]', '["--export=ALL,LD_PRELOAD=/tmp/x"]',
        '["--comment=a b"]', '["--comment=$(id)"]', '["-n", "1", "x"]', '["--mem=8G", "-N1"]',
        '["--array=1-100"]', '["-a1-100"]', '["--parsable"]', '["--test-only"]', '["-H"]', '["--hold"]',
        '["--deadline=now"]', '["--dependency=afterok:1"]', '["-dafterok:1"]', '["--ntasks"]',
        '["--output"]', '["-"]', '["--=x"]', '[""]', '["--mem=8G\\n#SBATCH --wrap=id"]', '["--comment=x\\u0000y"]',
        '["--qos=normal"]', '["--cpus-per-task=2"]', '["-c2"]', '["--nodes=1", "--exclusive"]',
    ]):
        add(f"sbatch-opt-{i:02d}", site(f"sbatch_options={opts}", b=live), "any")
    for i, opts in enumerate([
        '["-o", "/tmp/x"]', '["-o/tmp/x"]', '["-koe"]', '["-l", "walltime=1:00:00"]', '["-lwalltime=1:00:00"]',
        '["-I"]', '["-V"]', '["-v", "LD_PRELOAD=/tmp/x"]', '["positional"]', '["-S", "/tmp/evil"]', '["-S/tmp/evil"]',
        '["-W", "depend=afterok:1"]', '["-e"]', '["-N", "name"]', '["-q", "workq"]', '["-lselect=1:ncpus=2"]',
    ]):
        pbs = live.replace('"slurm"', '"pbs"')
        add(f"qsub-opt-{i:02d}", site(f"qsub_options={opts}", b=pbs), "any")
    for i, lines in enumerate([
        '{executable="/bin/sh"}', '{arguments="-c id"}', '{"+WantIOProxy"="false"}', '{request_memory="4GB"}',
        '{queue="100"}', '{"bad key"="x"}', '{output="/tmp/x"}', '{transfer_input_files="/etc/shadow"}',
        '{request_memory="4GB\\nexecutable=/bin/sh"}', '{universe="local"}',
    ]):
        cond = live.replace('"slurm"', '"htcondor"')
        add(f"condor-lines-{i:02d}", site(f"submit_lines={lines}", b=cond), "any")
    add("known-hosts-cert-authority", site(f'known_hosts="{ws / "kh-ca"}"', b=live.replace('"local"', '"ssh"') + 'host="h"\n'), "any")
    add("rest-url-bad", site('api="rest"\nrest_url="file:///etc/passwd"', b=live))
    add("rest-token-missing", site(f'api="rest"\nrest_url="http://127.0.0.1:1"\nrest_token_file="{ws / "nope"}"', b=live), "any")
    return out


def swf_line(i: int, fields: list[str] | None = None) -> str:
    f = fields or [str(i), str(i * 10), "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]
    return " ".join(f)


def swf_variants() -> list[tuple[str, str | bytes, str]]:
    hdr = "; MaxProcs: 16\n"
    good = hdr + "\n".join(swf_line(i) for i in range(1, 30)) + "\n"
    out = []
    add = lambda n, c, e="fail": out.append((n, c, e))  # noqa: E731
    add("good", good, "ok")
    add("empty", "")
    add("header-only", hdr)
    add("no-maxprocs", "\n".join(swf_line(i) for i in range(1, 5)) + "\n")
    add("maxprocs-nan", "; MaxProcs: nan\n" + swf_line(1) + "\n")
    add("maxprocs-neg", "; MaxProcs: -4\n" + swf_line(1) + "\n")
    add("maxprocs-huge", "; MaxProcs: 99999999999999999999999\n" + swf_line(1) + "\n")
    add("too-few-fields", hdr + "1 2 3\n")
    add("too-many-fields", hdr + swf_line(1) + " 9 9 9 9\n", "any")
    add("field-nan", hdr + swf_line(1, ["1", "nan", "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("field-inf", hdr + swf_line(1, ["1", "0", "5", "inf", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("field-1e309", hdr + swf_line(1, ["1", "0", "5", "1e309", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("field-negative-runtime", hdr + swf_line(1, ["1", "0", "5", "-100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n", "any")
    add("field-negative-submit", hdr + swf_line(1, ["1", "-50", "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n", "any")
    add("field-huge-procs", hdr + swf_line(1, ["1", "0", "5", "100", "99999999999999", "-1", "-1", "99999999999999", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n", "any")
    add("field-huge-int", hdr + swf_line(1, ["1", "0", "5", "1" + "0" * 400, "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("field-text", hdr + swf_line(1, ["1", "zero", "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("field-hex", hdr + swf_line(1, ["1", "0x10", "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n")
    add("nul-byte", hdr + swf_line(1) + "\x00\n")
    add("non-utf8", hdr.encode() + b"\xff\xfe " + swf_line(1).encode() + b"\n")
    add("unsorted-submits", hdr + swf_line(2, ["2", "100", "5", "100", "1", "-1", "-1", "1", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n" + swf_line(1) + "\n", "any")
    add("all-zero-procs", hdr + swf_line(1, ["1", "0", "5", "100", "0", "-1", "-1", "0", "200", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]) + "\n", "any")
    add("dup-job-ids", hdr + swf_line(1) + "\n" + swf_line(1) + "\n", "any")
    add("crlf", good.replace("\n", "\r\n"), "any")
    add("long-comment", "; " + "x" * 3_000_000 + "\n" + good, "any")
    add("long-line-no-newline", hdr + "1 " * 1_500_000)
    add("long-digits", hdr + "9" * 3_000_000)
    add("many-spaces", hdr + " " * 3_000_000 + "\n" + swf_line(1) + "\n", "any")
    return out


# ---------------------------------------------------------------- stores
def make_sim_store(path: Path, env: dict) -> None:
    subprocess.run([RESEL, "simulate", str(EX / "sleep-bag.toml"), "--sites", str(EX / "sites-thesis.toml"),
                    "--sizes", "4", "--strategies", "model,random", "--repeat", "1", "--workers", "1",
                    "--db", str(path)], env=env, check=True, capture_output=True, timeout=120)


def make_live_store(db: Path, workdir: Path, results: Path, *, names: tuple[str, ...] = ("out.txt",)) -> int:
    """A store with one finished live run of a local site whose outputs sit in ``workdir``."""
    sys.path.insert(0, str(ROOT))
    from resel.config import load_bag, load_sites
    from resel.live.stored import LiveOptions
    from resel.store import open_store, to_json, utc_now
    work = Path(workdir)
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="rv-live-"))
    sites_file = write(tmp / "sites.toml", "[[site]]\nname=\"loc\"\nkind=\"slurm\"\ncores=4\nclock={base=2.0}\n"
                       "pilot={mode=\"single\", walltime=600}\n[site.access]\ntransport=\"local\"\n"
                       f"workdir=\"{work}\"\n")
    outs = ", ".join(json.dumps(n) for n in names)
    bag_file = write(tmp / "bag.toml", f'[bag]\nname="t"\ncommand="true"\ncount=2\noutputs=[{outs}]\n'
                     '[bag.profile]\ninstructions=1e9\n')
    b, sites = load_bag(bag_file), load_sites(sites_file)
    db_ = open_store(db)
    with db_.atomic():
        run_id = db_["runs"].insert({"created": utc_now(), "mode": "live", "bag": b.name, "strategy": "model",
                                     "size": b.count, "seed": 0, "clock": "base", "status": "done", "t0": time.time(),
                                     "options": to_json(LiveOptions(strategy="model")), "sites": to_json(sites),
                                     "bag_spec": to_json(b), "bag_file": str(bag_file),
                                     "sites_file": str(sites_file)}).last_pk
        key = f"r{run_id}-abcdef"
        db_["runs"].update(run_id, {"run_key": key, "results": str(Path(results) / str(run_id))})
        for task in range(2):
            outputs = []
            for name in names:
                data = f"task {task} {name}\n".encode()
                f = work / key / "p1" / "tasks" / f"t{task}-a1" / name
                f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                f.write_bytes(data)
                outputs.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            db_["attempts"].insert({"run_id": run_id, "task": task, "attempt": 1, "site": "loc", "pilot": 1,
                                    "host": "h", "start": 1.0, "end": 2.0, "exit_code": 0, "outcome": "done",
                                    "outputs": json.dumps(outputs)})
    db_.conn.execute("pragma wal_checkpoint(TRUNCATE)")
    db_.conn.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return run_id


def damaged_stores(ws: Path, sim: Path, live: Path) -> list[tuple[str, Path, str]]:
    """(name, store path, expect for read commands)."""
    out = []

    def copy(name: str, src: Path, sql: list[str]) -> Path:
        p = ws / "stores" / f"{name}.db"
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, p)
        con = sqlite3.connect(p)
        for s in sql:
            try:
                con.execute(s)
            except sqlite3.Error as e:
                print(f"  (store {name}: {s[:60]}: {e})", file=sys.stderr)
        con.commit()
        con.close()
        return p

    rid = "(select max(id) from runs)"
    for name, src, sql in [
        ("sim-ok", sim, []),
        ("live-ok", live, []),
        ("per-site-garbage", sim, ["update runs set per_site = 'not json{'"]),
        ("per-site-wrongtype", sim, ["update runs set per_site = '[1,2,3]'"]),
        ("audit-blob", sim, ["update runs set audit = x'deadbeef00ff'"]),
        ("sites-null", sim, ["update runs set sites = null"]),
        ("sites-garbage", sim, ["update runs set sites = '{{{{'"]),
        ("sites-wrongtype", sim, ["update runs set sites = '\"x\"'"]),
        ("bag-spec-garbage", sim, ["update runs set bag_spec = '[]'"]),
        ("size-text", sim, ["update runs set size = 'huge'"]),
        ("size-neg", sim, ["update runs set size = -5"]),
        ("size-huge", sim, ["update runs set size = 9223372036854775807"]),
        ("ttc-nan", sim, ["update runs set ttc_wkd = 'nan'"]),
        ("ttc-inf", sim, ["update runs set ttc_wkd = 1e999"]),
        ("created-garbage", sim, ["update runs set created = 'yesterday-ish'"]),
        ("created-null", sim, ["update runs set created = null"]),
        ("created-blob", sim, ["update runs set created = x'00ff'"]),
        ("mode-bad", sim, ["update runs set mode = 'quantum'"]),
        ("events-blob", sim, ["update events set data = x'00ff00'"]),
        ("events-garbage", sim, ["update events set data = 'not json', kind = 'Nope'"]),
        ("tasks-nan", sim, ["update tasks set tq = 'nan', tx = 'x', ttc = 1e999"]),
        ("tasks-blob-site", sim, ["update tasks set site = x'ff', state = 42"]),
        ("decisions-garbage", sim, ["update decisions set a_r = 'x', target = x'00', window = -1e999"]),
        ("drop-tasks", sim, ["drop table tasks"]),
        ("drop-runs", sim, ["drop table runs"]),
        ("migrations-future", sim, ["insert into _sqlite_migrations (migration_set, name, applied_at) "
                                    "values ('resel', '9999_future', '2099')"]),
        ("user-version-huge", sim, ["pragma user_version = 2147483647"]),
        ("live-sites-garbage", live, ["update runs set sites = 'garbage'"]),
        ("live-sites-wrongtype", live, ["update runs set sites = '[{\"name\": 5}]'"]),
        ("live-options-garbage", live, ["update runs set options = '{\"poll\": \"fast\"}'"]),
        ("live-bag-garbage", live, ["update runs set bag_spec = '{\"count\": -1}'"]),
        ("live-results-null", live, ["update runs set results = null"]),
        ("live-results-rel", live, ["update runs set results = 'relative/dir'"]),
        ("live-runkey-bad", live, ["update runs set run_key = '../../etc'"]),
        ("live-outputs-garbage", live, ["update attempts set outputs = 'nope'"]),
        ("live-outputs-wrongtype", live, ["update attempts set outputs = '[1, \"x\"]'"]),
        ("live-outputs-dotdot", live, ["update attempts set outputs = json_array(json_object('name', "
                                       "'../../../ESCAPED', 'size', 3, 'sha256', '" + "a" * 64 + "'))"]),
        ("live-outputs-abs", live, ["update attempts set outputs = json_array(json_object('name', "
                                    "'/tmp/rv-ESCAPED-abs', 'size', 3, 'sha256', '" + "a" * 64 + "'))"]),
        ("live-outputs-size-nan", live, ["update attempts set outputs = json_array(json_object('name', "
                                         "'out.txt', 'size', 'nan', 'sha256', 'x'))"]),
        ("live-pilot-text", live, ["update attempts set pilot = 'p1'"]),
        ("live-task-huge", live, ["update attempts set task = 99999999999999999 where task = 0"]),
        ("live-status-weird", live, ["update runs set status = 'exploded'"]),
        ("live-task-outputs-path-link", live, []),
        ("not-sqlite", None, []),
        ("empty-file", None, []),
        ("truncated", sim, []),
    ]:
        if name == "not-sqlite":
            p = write(ws / "stores" / "not-sqlite.db", "this is not a database\n" * 100)
        elif name == "empty-file":
            p = write(ws / "stores" / "empty-file.db", b"")
        elif name == "truncated":
            p = ws / "stores" / "truncated.db"
            data = sim.read_bytes()
            write(p, data[: len(data) // 3])
        else:
            p = copy(name, src, [s.replace("RID", rid) for s in sql])
        out.append((name, p, "any"))
    return out


# ---------------------------------------------------------------- cases
def pick(items: list, i: int, k: int) -> list:
    """k of items, rotating with i: every item is used across the variants, each variant costs k."""
    return [items[(i * k + j) % len(items)] for j in range(min(k, len(items)))]


def build_cases(ws: Path, env: dict) -> list[Case]:
    cases: list[Case] = []
    inp = ws / "in"
    inp.mkdir(parents=True, exist_ok=True)
    write(inp / "in.txt", "data\n")
    write(inp / "in-0.txt", "0\n")
    (inp / "somedir").mkdir(exist_ok=True)
    if not (inp / "link-to-shadow").exists():
        os.symlink("/etc/shadow", inp / "link-to-shadow")
    if not (inp / "fifo").exists():
        os.mkfifo(inp / "fifo")
    sim_sites = write(inp / "sim-sites.toml", SIM_SITES)
    write(ws / "sshcfg-proxy", "Host h\n  ProxyCommand touch %s\n" % (ws / "CANARY-ssh"))
    write(ws / "sshcfg-match", "Match exec \"touch %s\"\n  User x\n" % (ws / "CANARY-ssh"))
    write(ws / "kh-ca", "@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGgL1Y3Z4\n"
                        "@revoked h ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGgL1Y3Z4\nh ssh-ed25519 garbage\n"
                        "@unknown-marker h ssh-rsa AAAA\n\n#comment\n")
    canaries = [str(ws / n) for n in ("CANARY-bag", "CANARY-sites", "CANARY-ssh", "CANARY-opt")]

    # bags × commands
    for bi, (name, content, expect) in enumerate(bag_variants(ws)):
        p = write(inp / f"bag-{name}.toml", content)
        cmds = [
            ("simulate", ["simulate", str(p), "--sites", str(sim_sites), "--sizes", "2", "--strategies", "model",
                          "--repeat", "1", "--workers", "1", "--no-store"]),
            ("plan", ["plan", str(p), "--sites", str(sim_sites)]),
            ("run-dry", ["run", str(p), "--sites", str(sim_sites), "--dry-run", "--db", str(ws / "run-dry.db")]),
            ("predict", ["model", "predict", str(p), "--sites", str(sim_sites), "--db", str(ws / "predict.db")]),
            ("sites-show", ["sites", "show", "--sites", str(sim_sites), "--bag", str(p)]),
        ]
        for cmd, argv in [cmds[2]] + pick([cmds[0], cmds[1], cmds[3], cmds[4]], bi, 1):
            e = expect
            # a bag's inputs/outputs matter only where the bag's data is read; a simulated run of a
            # bag whose inputs are not files here is allowed to say nothing about them
            # (`run --dry-run` of a file of simulated sites is `resel plan`: it reads no input file either;
            # with live sites it checks them — reported, not counted)
            if name.startswith(("inputs-", "outputs-", "results-")) and cmd in ("sites-show", "predict", "simulate",
                                                                                 "plan", "run-dry"):
                e = "any"
            cases.append(Case(f"bag/{name}/{cmd}", "bag", argv, e, watch=canaries))
    # the command scales: near the limit, twice as long
    for n in (30_000, 120_000):
        p = write(inp / f"bag-scale-{n}.toml", bag('name="a"\ncommand="' + "x" * n + '"\ncount=2'))
        cases.append(Case(f"bag/scale-cmd-{n}", "bag", ["sites", "show", "--sites", str(sim_sites), "--bag", str(p)],
                          "ok", scale=("bag-command", n)))
    for n in (250_000, 1_000_000):
        p = write(inp / f"bag-scale-count-{n}.toml", bag(f'name="a"\ncommand="true"\ncount={n}'))
        cases.append(Case(f"bag/scale-count-{n}", "bag", ["sites", "show", "--sites", str(sim_sites), "--bag", str(p)],
                          "any", scale=("bag-count", n)))
    for n in (1_000_000, 4_000_000):
        p = write(inp / f"bag-scale-line-{n}.toml", '[bag]\nname="' + "a" * n)
        cases.append(Case(f"bag/scale-unterminated-{n}", "bag", ["sites", "show", "--sites", str(sim_sites), "--bag", str(p)],
                          "fail", scale=("bag-unterminated", n)))

    # sites files × commands
    for si, (name, content, expect) in enumerate(site_variants(ws)):
        p = write(inp / f"sites-{name}.toml", content)
        show = ["sites", "show", "--sites", str(p)] + (["--json"] if si % 2 else [])
        cases.append(Case(f"sites/{name}/show", "sites", show, expect, watch=canaries))
        if not name.startswith(("live", "sbatch", "qsub", "condor", "known", "rest")):
            cases.append(Case(f"sites/{name}/simulate", "sites",
                              ["simulate", str(EX / "sleep-bag.toml"), "--sites", str(p), "--sizes", "2",
                               "--strategies", "model", "--repeat", "1", "--workers", "1", "--no-store"],
                              expect, watch=canaries))
    for n in (1_000_000, 4_000_000):
        p = write(inp / f"sites-scale-{n}.toml", "[[site]]\nnotes='" + "n" * n)
        cases.append(Case(f"sites/scale-unterminated-{n}", "sites", ["sites", "show", "--sites", str(p)], "fail",
                          scale=("sites-unterminated", n)))

    # SWF traces × commands
    for wi, (name, content, expect) in enumerate(swf_variants()):
        p = write(inp / f"trace-{name}.swf", content)
        cases.append(Case(f"swf/{name}/replay", "swf", ["replay", str(p), "--cores", "16"],
                          "any" if name.startswith(("no-maxprocs", "maxprocs-")) else expect))
        more = [Case(f"swf/{name}/replay-skip", "swf", ["replay", str(p), "--cores", "16", "--skip-bad"], "any"),
                Case(f"swf/{name}/replay-json", "swf", ["replay", str(p), "--json"], expect),
                Case(f"swf/{name}/grid", "swf", ["grid", str(p), "--cluster", "a:16", "--cluster", "b:8:1.5"],
                     "any" if name.startswith(("no-maxprocs", "maxprocs-")) else expect),
                Case(f"swf/{name}/history-import", "swf",
                     ["history", "import", "--site", "s", "--swf", str(p), "--db", str(ws / "hist.db")], "any")]
        cases += pick(more, wi, 2)
    for n in (2_000_000, 8_000_000):
        p = write(inp / f"trace-scale-{n}.swf", "; MaxProcs: 16\n" + "7" * n)
        cases.append(Case(f"swf/scale-noline-{n}", "swf", ["replay", str(p)], "fail", scale=("swf-noline", n)))
        p2 = write(inp / f"trace-scale-comment-{n}.swf", ";" + "c" * n)
        cases.append(Case(f"swf/scale-comment-{n}", "swf", ["replay", str(p2), "--cores", "4"], "fail",
                          scale=("swf-comment", n)))
    for n in (20_000, 80_000):
        p = write(inp / f"trace-scale-jobs-{n}.swf", "; MaxProcs: 64\n" + "\n".join(swf_line(i) for i in range(1, n)) + "\n")
        cases.append(Case(f"swf/scale-jobs-{n}", "swf", ["replay", str(p), "--policy", "fcfs"], "ok",
                          scale=("swf-jobs", n)))

    # sacct history imports
    for name, content in [("empty", ""), ("garbage", "a|b|c\n" * 10), ("nul", "JobID|State\x00\n"),
                          ("huge-line", "x" * 3_000_000), ("nan", "JobID|State|Submit|Start|AllocCPUS|TimelimitRaw|Partition\n"
                                                               "1|COMPLETED|nan|inf|1e309|-5|p\n"),
                          ("non-utf8", b"JobID|State\n\xff\xfe|x\n")]:
        # a line that is not a job is skipped and counted (sacct output has such lines); only an
        # unreadable or absurd file must fail
        e_sacct = "any" if name == "non-utf8" else "fail"
        p = write(inp / f"sacct-{name}.txt", content)
        cases.append(Case(f"sacct/{name}", "history", ["history", "import", "--site", "s", "--sacct", str(p),
                                                      "--db", str(ws / "hist.db")], e_sacct))

    # stores × reading and writing commands
    sim = ws / "sim.db"
    make_sim_store(sim, env)
    live = ws / "live.db"
    make_live_store(live, ws / "livework", ws / "liveresults")
    for di, (name, p, expect) in enumerate(damaged_stores(ws, sim, live)):
        ok_store = name in ("sim-ok", "live-ok")
        scmds = [
            ("runs", ["runs", "--db", str(p)], "ok" if ok_store else "any"),
            ("runs-json", ["runs", "--db", str(p), "--json", "--wide"], "ok" if ok_store else "any"),
            ("report", ["report", "1", "--db", str(p)], "ok" if ok_store else "any"),
            ("report-json", ["report", "1", "--db", str(p), "--json", "--decisions", "5"], "ok" if ok_store else "any"),
            ("report-html", ["report", "1", "--db", str(p), "--html", str(ws / "out" / f"{name}.html")], "any"),
            ("status", ["status", "--db", str(p)], "any"),
            ("results", ["results", "1", "--db", str(p)], "any"),
            ("fetch", ["fetch", "1", "--db", str(p), "--json"], "any"),
            ("prune-dry", ["prune", "--db", str(p), "--dry-run", "--run", "1"], "any"),
            ("history-show", ["history", "show", "--db", str(p)], "any"),
            ("model-show", ["model", "show", "--db", str(p)], "any"),
        ]
        if ok_store:
            chosen = scmds
        elif name.startswith("live-"):
            chosen = [scmds[2], scmds[5], scmds[6], scmds[7]] + pick([scmds[0], scmds[1], scmds[3], scmds[4], scmds[8]], di, 1)
        else:
            chosen = [scmds[2]] + pick(scmds[:2] + scmds[3:], di, 2)
        for cmd, argv, e in chosen:
            cases.append(Case(f"store/{name}/{cmd}", "store", argv, e,
                              watch=[str(ws / "ESCAPED"), "/tmp/rv-ESCAPED-abs", str(ws / "liveresults" / "ESCAPED")]))
    for cmd in ("runs", "report 1", "status", "results 1", "history show", "model show"):
        cases.append(Case(f"store/missing/{cmd}", "store", cmd.split() + ["--db", str(ws / "nope" / "none.db")], "any"))
    cases.append(Case("store/dir-as-db/runs", "store", ["runs", "--db", str(ws)], "fail"))
    cases.append(Case("store/fifo-as-db/runs", "store", ["runs", "--db", str(inp / "fifo")], "fail"))
    cases.append(Case("store/devnull/runs", "store", ["runs", "--db", "/dev/null"], "fail"))
    cases.append(Case("store/devzero/runs", "store", ["runs", "--db", "/dev/zero"], "fail"))
    cases.append(Case("store/report-no-run", "store", ["report", "999", "--db", str(sim)], "fail"))
    cases.append(Case("store/results-sim-run", "store", ["results", "1", "--db", str(sim)], "fail"))
    cases.append(Case("store/fetch-sim-run", "store", ["fetch", "1", "--db", str(sim)], "fail"))
    cases.append(Case("store/cancel-sim-run", "store", ["cancel", "1", "--db", str(sim)], "fail"))
    cases.append(Case("store/resume-sim-run", "store", ["run", "--resume", "1", "--db", str(sim)], "fail"))
    cases.append(Case("store/resume-done-live", "store", ["run", "--resume", "1", "--db", str(live)], "fail"))

    # option values
    bad_floats = ["nan", "inf", "-inf", "1e309", "-1", "0", "", "1e-400", "NaN", " 1", "0x10", "1_000", "１"]
    bad_ints = ["-1", "0", "99999999999999999999999", "1e3", "", "nan", "2.5", "9223372036854775808"]
    sim_base = ["simulate", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites), "--strategies", "model",
                "--repeat", "1", "--workers", "1", "--no-store"]
    for fi, v in enumerate(bad_floats):
        fl = []
        fl.append(Case(f"opt/simulate-risk={v!r}", "opt", sim_base + ["--sizes", "2", "--risk", v], "fail"))
        fl.append(Case(f"opt/simulate-shift={v!r}", "opt", sim_base + ["--sizes", "2", "--shift", v], "any"))
        fl.append(Case(f"opt/replay-speed={v!r}", "opt", ["replay", str(inp / "trace-good.swf"), "--speed", v],
                          "fail" if v not in ("1e-400", " 1", "1_000", "１") else "any"))
        fl.append(Case(f"opt/grid-load={v!r}", "opt", ["grid", str(inp / "trace-good.swf"), "--cluster", "a:4",
                                                          "--load", v], "fail" if v not in ("1e-400", " 1", "1_000", "１") else "any"))
        fl.append(Case(f"opt/plan-quantile={v!r}", "opt", ["plan", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                              "--quantile", v], "fail"))
        fl.append(Case(f"opt/run-poll={v!r}", "opt", ["run", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                         "--dry-run", "--poll", v, "--db", str(ws / "run-dry.db")],
                          "fail" if v not in (" 1", "1_000") else "any"))
        fl.append(Case(f"opt/history-show-quantile={v!r}", "opt", ["history", "show", "--quantile", v,
                                                                      "--db", str(ws / "hist.db")], e_sacct))
        cases += pick(fl, fi, 3)
    for ii, v in enumerate(bad_ints):
        il = []
        il.append(Case(f"opt/simulate-sizes={v!r}", "opt", sim_base + ["--sizes", v], "fail"))
        il.append(Case(f"opt/simulate-repeat={v!r}", "opt", sim_base + ["--sizes", "2", "--repeat", v], "fail"))
        il.append(Case(f"opt/replay-cores={v!r}", "opt", ["replay", str(inp / "trace-good.swf"), "--cores", v], "fail"))
        il.append(Case(f"opt/replay-first={v!r}", "opt", ["replay", str(inp / "trace-good.swf"), "--first", v], "fail"))
        il.append(Case(f"opt/runs-limit={v!r}", "opt", ["runs", "--limit", v, "--db", str(sim)], "fail"))
        il.append(Case(f"opt/report-run={v!r}", "opt", ["report", v, "--db", str(sim)], "fail"))
        il.append(Case(f"opt/report-decisions={v!r}", "opt", ["report", "1", "--decisions", v, "--db", str(sim)],
                          "fail" if v != "0" else "ok"))
        il.append(Case(f"opt/seed={v!r}", "opt", sim_base + ["--sizes", "2", "--seed", v],
                          "fail" if v not in ("0", "99999999999999999999999", "9223372036854775808", "-1") else "any"))
        cases += pick(il, ii, 3)
    for v in ["2", "2,", ",", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21", "4,4", "a", "1e2", "-4",
              "2;id", "0,2"]:
        cases.append(Case(f"opt/sizes-list={v!r}", "opt", sim_base + ["--sizes", v],
                          "any" if v in ("2", "4,4", "2,") or v.startswith("1,2,3") else "fail"))
    for n in (16384, 65536):    # simulate's cost in the bag's size
        cases.append(Case(f"opt/sizes-scale={n}", "opt", sim_base + ["--sizes", str(n)], "ok", scale=("simulate-size", n)))
    for v in ["", "bogus", "topk:0", "topk:-1", "topk:nan", "queue:1e309", "race:0", "failover:nan", "failover:-5",
              "rebroker:inf", "model+model", "model+reselect+reselect", "model@nope", "random+learn+reselect",
              "auto,,model", "topk:99999999999999999999", "queue:9999999999", "earliest+reselect", "oracle+learn",
              "model;id", "model\u202e"]:
        cases.append(Case(f"opt/strategies={v!r}", "opt", ["simulate", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                            "--strategies", v, "--sizes", "2", "--repeat", "1",
                                                            "--workers", "1", "--no-store"], "any"))
        if len(v) % 3 == 0:
            cases.append(Case(f"opt/plan-strategy={v!r}", "opt", ["plan", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                               "--strategy", v], "any"))
    for v in ["", "30", "30x", "-5d", "nan d", "1e309d", "99999999999w", "2026-13-45", "0d", "9999-12-31", "0001-01-01",
              "d", "1.5d", "inf h", "١٢d"]:
        cases.append(Case(f"opt/runs-since={v!r}", "opt", ["runs", "--since", v, "--db", str(sim)], "any"))
        cases.append(Case(f"opt/prune-older={v!r}", "opt", ["prune", "--older-than", v, "--dry-run", "--db", str(sim)], "any"))
    for v in ["", "x", "1-", "-1", "5-3", "1-99999999999999999999", "1,,2", "0", "1-1000000000", "1,a"]:
        cases.append(Case(f"opt/prune-run={v!r}", "opt", ["prune", "--run", v, "--dry-run", "--db", str(sim)], "any"))
    for v in ["a", "a:0", "a:-4", "a:4:nan", "a:4:0", "a:4:inf", "a:4:1:bogus", ":4", "a:4:1:easy:extra",
              "a:99999999999999999999", "a:4:1e309", "a:b"]:
        cases.append(Case(f"opt/grid-cluster={v!r}", "opt", ["grid", str(inp / "trace-good.swf"), "--cluster", v], "fail"))
    for v in ["", "x", "10,", "nan", "inf", "-5", "1e309", "0", ",", "10,10"]:
        cases.append(Case(f"opt/replay-tau={v!r}", "opt", ["replay", str(inp / "trace-good.swf"), "--tau", v],
                          "any" if v in ("10,10", "10,") else "fail"))
    for v in ["", "x", "1,,2", "-1", "99999999999999999999"]:
        cases.append(Case(f"opt/replay-status={v!r}", "opt", ["replay", str(inp / "trace-good.swf"), "--status", v], "any"))
    for v in ["tcp://127.0.0.1:1", "ucx://x", "ws://x", "inproc://x", "local:0", "local:-1", "local:nan", "",
              "local:99999999999", "tls://", "tls://[::1", "http://x"]:
        cases.append(Case(f"opt/dask={v!r}", "opt", sim_base + ["--sizes", "2", "--dask", v], "fail"))
    cases.append(Case("opt/dask-insecure-no-dask", "opt", sim_base + ["--sizes", "2", "--dask-insecure"], "any"))
    for pi, v in enumerate(["-1", "0", "nan", "inf", "1e309", "99999999999999999999"]):
        pl = []
        pl.append(Case(f"opt/profile-repeat={v!r}", "opt", ["profile", "--repeat", v, "--db", str(ws / "prof.db"),
                                                               "--", "true"], "fail"))
        pl.append(Case(f"opt/profile-scale={v!r}", "opt", ["profile", "--scale", v, "--reduced", "true",
                                                              "--db", str(ws / "prof.db"), "--", "true"], "fail"))
        pl.append(Case(f"opt/model-fit-holdout={v!r}", "opt", ["model", "fit", "--holdout", v, "--db", str(sim)], "fail"))
        pl.append(Case(f"opt/history-walltime={v!r}", "opt", ["history", "show", "--cores", "4", "--walltime", v,
                                                                 "--db", str(ws / "hist.db")], "any"))
        pl.append(Case(f"opt/task-timeout={v!r}", "opt", ["run", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                             "--dry-run", "--task-timeout", v, "--db", str(ws / "run-dry.db")],
                          "fail"))
        pl.append(Case(f"opt/max-time={v!r}", "opt", ["run", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites),
                                                         "--dry-run", "--max-time", v, "--db", str(ws / "run-dry.db")], "fail"))
        cases += pick(pl, pi, 3)
    cases.append(Case("opt/profile-reduced-meta", "opt", ["profile", "--reduced", f"true; touch {ws / 'CANARY-opt'}",
                                                          "--scale", "2", "--db", str(ws / "prof.db"), "--", "true"],
                      "any", watch=canaries))
    cases.append(Case("opt/profile-label-control", "opt", ["profile", "--label", "\x1b]0;x\x07", "--db", str(ws / "prof.db"),
                                                           "--", "true"], "any"))
    cases.append(Case("opt/profile-nocommand", "opt", ["profile", "--db", str(ws / "prof.db")], "fail"))
    cases.append(Case("opt/profile-missing-cmd", "opt", ["profile", "--db", str(ws / "prof.db"), "--",
                                                         "/nonexistent/cmd"], "fail"))
    # outputs (plots, html, replay output) to bad places
    for target, e in [("/proc/version", "fail"), ("/dev/full", "fail"), (str(ws), "fail"), (str(ws / "nodir" / "x"), "any"),
                      ("", "fail"), (str(ws / "out" / "link-out"), "fail")]:
        cases.append(Case(f"out/replay-output={target!r}", "out", ["replay", str(inp / "trace-good.swf"), "--output", target], e))
        cases.append(Case(f"out/report-html={target!r}", "out", ["report", "1", "--db", str(sim), "--html", target], e))
    (ws / "out").mkdir(exist_ok=True)
    if not (ws / "out" / "link-out").is_symlink():
        os.symlink(ws / "out" / "VICTIM", ws / "out" / "link-out")
    # other subcommands with odd arguments
    for argv, e in [(["sites", "defaults"], "ok"), (["sites", "show"], "ok"), (["sites", "show", "--clock", "avg"], "ok"),
                    (["sites", "show", "--sites", str(ws / "nope.toml")], "fail"),
                    (["sites", "show", "--sites", str(inp / "fifo")], "fail"),
                    (["sites", "show", "--sites", "/dev/zero"], "fail"),
                    (["sites", "show", "--sites", "/dev/urandom"], "fail"),
                    (["sites", "show", "--sites", str(inp)], "fail"),
                    (["simulate", str(inp / "fifo"), "--sizes", "2", "--no-store"], "fail"),
                    (["simulate", "/dev/zero", "--sizes", "2", "--no-store"], "fail"),
                    (["plan", "/dev/urandom", "--sites", str(sim_sites)], "fail"),
                    (["replay", "/dev/zero"], "fail"), (["replay", str(inp / "fifo")], "fail"),
                    (["replay", "/dev/urandom"], "fail"), (["replay", str(inp)], "fail"),
                    (["grid", "/dev/zero", "--cluster", "a:4"], "fail"),
                    (["scenario", "seed004", "--help"], "ok"),
                    (["sites", "check", "--sites", str(sim_sites)], "any"),
                    (["sites", "status", "--sites", str(sim_sites), "--timeout", "nan"], "fail"),
                    (["sites", "status", "--sites", str(sim_sites), "--timeout", "-1"], "fail"),
                    (["sites", "probe", "--sites", str(sim_sites), "--timeout", "1e309"], "fail"),
                    (["history", "fetch", "--sites", str(sim_sites), "--days", "-1"], "fail"),
                    (["history", "fetch", "--sites", str(sim_sites), "--days", "99999999999999"], "fail"),
                    (["history", "learn", "--db", str(sim)], "any"),
                    (["history", "show", "--site", "\x1b[31m", "--db", str(sim)], "any"),
                    (["history", "import", "--site", "", "--swf", str(inp / "trace-good.swf"), "--db", str(ws / "hist.db")], "fail"),
                    (["history", "import", "--site", "a\nb", "--swf", str(inp / "trace-good.swf"), "--db", str(ws / "hist.db")], "fail"),
                    (["history", "import", "--site", "s", "--swf", "/dev/zero", "--db", str(ws / "hist.db")], "fail"),
                    (["cancel", "0", "--db", str(sim)], "fail"), (["cancel", "-1", "--db", str(sim)], "fail"),
                    (["status", "99999999999999999999", "--db", str(sim)], "fail"),
                    (["run", "--sites", str(sim_sites)], "fail"),
                    (["run", str(EX / "sleep-bag.toml"), "--sites", str(sim_sites), "--db", str(ws / "run-sim.db")], "fail"),
                    (["run", str(EX / "sleep-bag.toml"), "--resume", "1", "--sites", str(sim_sites),
                      "--db", str(ws / "run-sim.db")], "fail"),
                    (["model", "predict", str(EX / "sleep-bag.toml"), "--model", "fitted", "--db", str(sim)], "any"),
                    (["model", "fit", "--db", str(sim)], "any"),
                    (["nosuchcommand"], "fail"), (["--nosuchoption"], "fail"), (["report"], "fail"),
                    ]:
        cases.append(Case("misc/" + " ".join(a[:40] for a in argv), "misc", argv, e))
    return cases


# ---------------------------------------------------------------- running
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
#: click's usage errors (exit status 2): the option or argument named, with what is wrong
USAGE = re.compile(r"Usage:|Error: (Invalid value|No such (option|command)|Missing (argument|option)|Got unexpected|"
                   r"Option '[^']+' requires|Got unexpected extra)|\"error\": \"(Invalid value|No such|Missing)")


def run_case(case: Case, ws: Path, env: dict) -> Outcome:
    cwd = ws / "cwd"
    cwd.mkdir(exist_ok=True)
    before = {w: os.path.lexists(w) for w in case.watch}
    began = time.monotonic()
    problems = []
    try:
        p = subprocess.run([RESEL, *case.argv], cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT,
                           input=case.stdin or b"", start_new_session=True)
        rc, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
        problems.append("hang")
    seconds = time.monotonic() - began
    if TRACEBACK.search(out) or TRACEBACK.search(err):
        problems.append("traceback")
    if rc is not None:
        if rc == 0 and case.expect == "fail":
            problems.append("wrong0")
        if rc < 0:
            problems.append(f"signal{-rc}")
        elif rc >= 2 and not (rc == 2 and (USAGE.search(err + out) or err.lstrip().startswith("Error:"))):
            # (resel itself never exits 2: a 2 with an "Error:" line is click's UsageError)
            problems.append("badcode")
        if rc != 0 and case.expect == "ok":
            problems.append("okfailed")
    for w in case.watch:
        if os.path.lexists(w) and not before[w]:
            problems.append("canary" if "CANARY" in w else "escape")
            try:
                os.unlink(w)
            except OSError:
                shutil.rmtree(w, ignore_errors=True)
    tail = (err.strip().splitlines() or out.strip().splitlines() or [""])[-1][:200]
    return Outcome(case, rc, seconds, problems, tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--only", default=None, help="run only the cases whose name contains this")
    ap.add_argument("--verbose", action="store_true", help="print every case as it runs")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--list", action="store_true", help="only count and list the cases")
    ap.add_argument("--make-live-store", metavar="DB", default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--results", default=None)
    ap.add_argument("--names", default="out.txt", help="--make-live-store: output names, comma-separated")
    args = ap.parse_args()
    if args.make_live_store:
        rid = make_live_store(Path(args.make_live_store), Path(args.workdir), Path(args.results),
                              names=tuple(args.names.split(",")))
        print(rid)
        return 0
    ws = Path(tempfile.mkdtemp(prefix="rv-hostile-"))
    home = ws / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESEL_", "XDG_"))}
    env.update({"HOME": str(home), "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb", "PYTHONUNBUFFERED": "1"})
    cases = build_cases(ws, env)
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    if args.list:
        for c in cases:
            print(c.group, c.expect, c.name)
        print(len(cases), "cases")
        shutil.rmtree(ws, ignore_errors=True)
        return 0
    results: list[Outcome] = []
    began = time.monotonic()
    for i, case in enumerate(cases):
        o = run_case(case, ws, env)
        results.append(o)
        if args.verbose or o.problems:
            print(f"[{i + 1}/{len(cases)}] {o.seconds:5.2f}s rc={o.rc} {case.name} {' '.join(o.problems)}"
                  + (f"  | {o.tail}" if o.problems else ""), file=sys.stderr, flush=True)
    kinds = ["traceback", "hang", "wrong0", "badcode", "canary", "escape", "okfailed"]
    counts = {k: sum(k in o.problems for o in results) for k in kinds}
    counts["signal"] = sum(any(p.startswith("signal") for p in o.problems) for o in results)
    groups = sorted({o.case.group for o in results})
    per_group = {g: {"cases": sum(o.case.group == g for o in results),
                     **{k: sum(o.case.group == g and k in o.problems for o in results) for k in kinds},
                     "max_s": round(max((o.seconds for o in results if o.case.group == g), default=0.0), 2)}
                 for g in groups}
    scale: dict[str, list[tuple[float, float]]] = {}
    for o in results:
        if o.case.scale:
            scale.setdefault(o.case.scale[0], []).append((o.case.scale[1], o.seconds))
    ratios = {k: {"sizes": [s for s, _ in sorted(v)], "seconds": [round(t, 2) for _, t in sorted(v)],
                  "size_ratio": round(sorted(v)[-1][0] / sorted(v)[0][0], 1),
                  "time_ratio": round(sorted(v)[-1][1] / max(sorted(v)[0][1], 1e-3), 2)} for k, v in scale.items() if len(v) > 1}
    slowest = max(results, key=lambda o: o.seconds)
    doc = {"cases": len(results), **counts, "max_seconds": round(slowest.seconds, 2), "slowest": slowest.case.name,
           "wall_seconds": round(time.monotonic() - began, 1), "per_group": per_group, "scale": ratios,
           "problems": [{"case": o.case.name, "argv": o.case.argv, "rc": o.rc, "problems": o.problems,
                         "seconds": round(o.seconds, 2), "tail": o.tail} for o in results if o.problems],
           "exit_codes": {str(k): sum(o.rc == k for o in results) for k in sorted({o.rc for o in results}, key=str)},
           "scratch": str(ws) if args.keep else None}
    if not args.keep:
        shutil.rmtree(ws, ignore_errors=True)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(f"{'group':10} {'cases':>6} {'trace':>6} {'hang':>5} {'wrong0':>7} {'badcode':>8} {'canary':>7} "
              f"{'escape':>7} {'okfail':>7} {'max s':>6}")
        for g, row in per_group.items():
            print(f"{g:10} {row['cases']:6} {row['traceback']:6} {row['hang']:5} {row['wrong0']:7} {row['badcode']:8} "
                  f"{row['canary']:7} {row['escape']:7} {row['okfailed']:7} {row['max_s']:6}")
        print(f"{'total':10} {len(results):6} {counts['traceback']:6} {counts['hang']:5} {counts['wrong0']:7} "
              f"{counts['badcode']:8} {counts['canary']:7} {counts['escape']:7} {counts['okfailed']:7} "
              f"{doc['max_seconds']:6}")
        print(f"slowest: {slowest.case.name} ({slowest.seconds:.2f} s); exit codes {doc['exit_codes']}")
        for k, r in ratios.items():
            print(f"scale {k}: sizes {r['sizes']} -> {r['seconds']} s (size x{r['size_ratio']}, time x{r['time_ratio']})")
        for p in doc["problems"]:
            print(f"  {p['case']}: {','.join(p['problems'])} rc={p['rc']} {p['seconds']}s | {p['tail']}")
    bad = counts["traceback"] + counts["hang"] + counts["wrong0"] + counts["badcode"] + counts["canary"] + counts["escape"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
