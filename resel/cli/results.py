"""``resel results`` and ``resel fetch``: a live run's outputs at home (docs/data.md).

``results`` lists every output the run brought home and checks each file against the size
and sha256 recorded when it arrived — what is there, what is missing, what changed — and the
tasks whose outputs never came home. ``fetch`` brings home again what is missing or damaged,
and what a stopped run left on its sites, from the sites (where the task's folder is still
there); each file is atomic and checked, so it can be run again until everything is home.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from resel.cli import common as c
from resel.cli.common import RUN_ID, Table, fail_cleanly, fail_json, print_json
from resel.errors import ReselError
from resel.safe_text import markup as m


@dataclass
class Missing:
    """An attempt whose outputs are not (all) home: where they are on the site, what they are."""

    task: int
    attempt: int
    site: str
    pilot: int
    outputs: list[dict]
    why: str
    #: the store's record of the outputs cannot be read: nothing to fetch from, only to report
    damaged: bool = False


def _run_row(store, run_id: int) -> dict:
    rows = list(store.query("select id, mode, status, results, bag_spec, size from runs where id = ?", [run_id]))
    if not rows:
        raise ReselError(f"no run {run_id} in the store", hint="list them with `resel runs --kind live`")
    run = rows[0]
    if run["mode"] != "live":
        raise ReselError(f"run {run_id} is a simulated run: it moved no files",
                         hint="`resel report RUN` shows a simulated run")
    if not run["results"]:
        raise ReselError(f"run {run_id}'s bag declares no outputs: nothing comes home",
                         hint="a bag's `outputs` say what comes home (docs/data.md)")
    return run


def task_names(bag_spec: str | None) -> list[str] | None:
    """A table bag's task names by index, which is all a user knows a task by (its folder at
    home is ``task-NN``, its index); None for a bag of equal tasks, or a stored bag that
    cannot be read (the index alone then names each task)."""
    try:
        names = [str(row["name"]) for row in json.loads(bag_spec or "{}").get("tasks") or ()]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return names or None


def check_outputs(store, run_id: int) -> tuple[list[dict], list[Missing]]:
    """Every output row of the run with its state at home (``ok``, ``missing``, ``changed``),
    and the attempts whose outputs are not all home."""
    from resel.backends.files import sha256_file
    rows = []
    for r in store.query("select task, attempt, site, name, size, sha256, path from task_outputs where run_id = ? "
                         "order by task, name", [run_id]):
        row = dict(r)
        try:
            if os.path.islink(row["path"]) or not os.path.isfile(row["path"]):
                row["state"] = "missing"
            else:
                moved = sha256_file(row["path"])
                row["state"] = "ok" if (moved.size, moved.sha256) == (row["size"], row["sha256"]) else "changed"
        except OSError:
            row["state"] = "missing"
        rows.append(row)
    home = {(r["task"], r["attempt"]) for r in rows}
    bad = {(r["task"], r["attempt"]) for r in rows if r["state"] != "ok"}
    missing: list[Missing] = []
    # attempts that ended well with outputs: the last such attempt of each task
    latest: dict[int, dict] = {}
    for a in store.query("select task, attempt, site, pilot, outputs from attempts where run_id = ? and "
                         "outcome = 'done' and outputs is not null order by task, attempt", [run_id]):
        latest[a["task"]] = dict(a)
    for task, a in sorted(latest.items()):
        key = (task, a["attempt"])
        delivered = {(r["task"], r["attempt"]) for r in rows if r["task"] == task}
        if key in home and key not in bad:
            continue
        if key not in home and delivered:
            continue                     # another attempt of the task delivered
        from resel.backends.pilotsite import _outputs_problem
        try:
            outputs = json.loads(a["outputs"])
            problem = _outputs_problem({"outputs": outputs})
        except ValueError as exc:
            outputs, problem = None, str(exc)
        if problem or not isinstance(a["pilot"], int):     # a damaged store: said, never fetched from
            missing.append(Missing(task, a["attempt"], a["site"], a["pilot"], [],
                                   f"its stored outputs cannot be read ({problem or 'bad pilot number'}): the store "
                                   "is damaged", damaged=True))
            continue
        missing.append(Missing(task, a["attempt"], a["site"], a["pilot"], outputs,
                               "damaged or missing at home" if key in bad else "never fetched"))
    return rows, missing


def failed_log(store, run_id: int, bag_spec: str | None) -> list[dict]:
    """Each task the run gave up (failed), with each of its attempts (site, outcome, reason)
    and what its last attempt wrote last on stderr (a live run's agents keep a tail): why it
    failed is the first thing its user asks, and the report said only "(failed)"."""
    failed = [r["task"] for r in store.query(
        "select task from tasks where run_id = ? and state = 'failed' order by task", [run_id])]
    if not failed:
        return []
    names = task_names(bag_spec)
    folders = _attempt_folders(store, run_id)
    attempts: dict[int, list[dict]] = {t: [] for t in failed}
    if "attempts" in store.table_names():
        for a in store.query("select task, attempt, site, pilot, outcome, reason, exit_code, stderr_tail from attempts "
                             "where run_id = ? and task in (select task from tasks where run_id = ? and "
                             "state = 'failed') order by task, attempt", [run_id, run_id]):
            attempts[a["task"]].append(dict(a))
    out = []
    for task in failed:
        tried = attempts[task]
        tail = next((a["stderr_tail"] for a in reversed(tried) if a["stderr_tail"]), "") or ""
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
        ran = next((a for a in reversed(tried) if a["pilot"] is not None), None)
        out.append({"task": task, "task_name": names[task] if names and task < len(names) else None,
                    "attempts": [{k: a[k] for k in ("attempt", "site", "outcome", "reason")} for a in tried],
                    "stderr_last_line": last[-300:] or None,
                    "folder": folders(ran["site"], ran["pilot"], task, ran["attempt"]) if ran else None})
    return out


def _attempt_folders(store, run_id: int):
    """``folder(site, pilot, task, attempt)``: where a failed attempt's task folder (its stdout,
    stderr and files) stays on its site, as ``site:path``, or None where it does not (an HTCondor
    pool's slot scratch goes with the pilot; a simulated run has none). A run removes a task's
    folder only once its outputs are home, so a failed task's stays: its user looks there next."""
    from resel.backends.pilotsite import pilot_path, task_dir, task_key
    from resel.live.stored import sites_from_json
    try:
        row = next(iter(store.query("select run_key, sites from runs where id = ?", [run_id])), None)
        sites = {s.name: s for s in sites_from_json(json.loads(row["sites"]))} if row and row["run_key"] else {}
    except (ValueError, TypeError, KeyError, ReselError):
        sites = {}

    def folder(site: str, pilot: int, task: int, attempt: int) -> str | None:
        s = sites.get(site)
        if s is None or s.kind == "htcondor" or s.access is None:
            return None
        try:
            return f"{site}:{task_dir(pilot_path(s.access.workdir, row['run_key'], pilot), task_key(task, attempt))}"
        except ReselError:                # a run key that is no run key: no path made of it
            return None
    return folder


@click.command("results")
@click.argument("run_id", type=RUN_ID)
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Run store (SQLite). Default: $RESEL_DB or ~/.local/share/resel/resel.db.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: every output and its state.")
@fail_cleanly
def results_cmd(run_id: int, db: Path | None, as_json: bool) -> None:
    """List a live run's outputs at home and check each against its recorded sha256.

    Exit status 1 when an output is missing or changed at home, a task's outputs never came
    home (then `resel fetch RUN` brings them), or a task failed (each is named, with why).

    \b
    Example:
      resel results 7
    """
    from resel.store import read_store
    store = read_store(db)
    run = _run_row(store, run_id)
    rows, missing = check_outputs(store, run_id)
    names = task_names(run["bag_spec"])

    def name_of(task: int) -> str | None:
        return names[task] if names is not None and 0 <= task < len(names) else None
    counts = {s: sum(r["state"] == s for r in rows) for s in ("ok", "missing", "changed")}
    # the failed tasks, each with its last attempt's reason (as `resel report` lists them): none
    # of their outputs came home, and no fetch brings them
    failed = [(f["task"], f["attempts"][-1]["reason"] if f["attempts"] else None, f["folder"])
              for f in failed_log(store, run_id, run["bag_spec"])]
    bad = counts["missing"] or counts["changed"] or missing or failed
    problem = (f"run {run_id}: {counts['missing'] + counts['changed']:,} output(s) missing or changed at home, "
               f"{len(missing):,} task(s) not home" + (f", {len(failed):,} task(s) failed" if failed else ""))
    hint = (f"`resel fetch {run_id}` brings them" if counts["missing"] or counts["changed"] or missing
            else f"`resel report {run_id}` says why each failed task failed")
    if as_json:
        doc = {"run": run_id, "results": run["results"],
               "outputs": [{**r, "task_name": name_of(r["task"])} for r in rows], "counts": counts,
               "not_home": [{"task": x.task, "task_name": name_of(x.task), "attempt": x.attempt, "site": x.site,
                             "why": x.why} for x in missing],
               "failed": [{"task": t, "task_name": name_of(t), "why": why, "folder": folder}
                          for t, why, folder in failed]}
        if bad:
            fail_json(doc, problem, hint)
        print_json(doc)
        return
    else:
        table = Table(title=f"run {run_id}: outputs in {m(run['results'])}")
        columns = [("task", "right"), ("file", "left"), ("size [B]", "right"), ("sha256", "left"),
                   ("site", "left"), ("at home", "left")]
        if names is not None:                 # a table bag: its rows' names beside the index
            columns.insert(1, ("task name", "left"))
        for col, just in columns:
            table.add_column(col, justify=just)
        for r in rows:
            cells = [str(r["task"]), m(r["name"]), f"{r['size']:,}", r["sha256"][:12], m(r["site"] or ""), r["state"]]
            if names is not None:
                cells.insert(1, m(name_of(r["task"]) or ""))
            table.add_row(*cells)
        c.out.print(table)
        c.out.print(f"{counts['ok']:,} ok, {counts['missing']:,} missing, {counts['changed']:,} changed at home"
                    + (f"; {len(missing):,} task(s) whose outputs are not home: `resel fetch {run_id}`" if missing else "")
                    + (f"; {len(failed):,} task(s) failed, so none of their outputs came home" if failed else ""),
                    soft_wrap=True)
        for task, why, folder in failed[:10]:
            name = name_of(task)
            c.out.print(f"  task {task}{f' ({name})' if name else ''} failed: {why or 'no reason recorded'}"
                        + (f"; its files: {folder}" if folder else ""), soft_wrap=True, markup=False)
        if len(failed) > 10:
            c.out.print(f"  … and {len(failed) - 10:,} more: `resel report {run_id}`", soft_wrap=True, markup=False)
    if bad:
        sys.exit(1)


@click.command("fetch")
@click.argument("run_id", type=RUN_ID)
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Run store (SQLite). Default: $RESEL_DB or ~/.local/share/resel/resel.db.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: what was fetched, what could not be.")
@fail_cleanly
def fetch_cmd(run_id: int, db: Path | None, as_json: bool) -> None:
    """Bring home a live run's outputs that are missing or damaged at home.

    Each output is fetched from the site it ran on (its task folder must still be there:
    runs remove it once the outputs are home, unless `resel run --keep-remote`), into a
    temporary name, checked against the sha256 its agent recorded, then renamed. Run it again
    after an interruption: what is home and right is left alone.

    \b
    Example:
      resel fetch 7
    """
    from resel.backends.connect import open_site
    from resel.live import notes as live_notes
    from resel.live.staging import SiteData
    from resel.live.stored import load_live_run
    from resel.store import open_store
    from resel.task_data import task_folder
    store = open_store(db)
    run = _run_row(store, run_id)
    if run["status"] == "running" and live_notes.holder(store, run_id, 30.0) is not None:
        raise ReselError(f"run {run_id} is running: its coordinator brings its outputs home itself",
                         hint=f"`resel status {run_id}` shows it; run this once it has stopped")
    row, bag, sites, _options = load_live_run(store, run_id)
    _rows, missing = check_outputs(store, run_id)
    by_name = {s.name: s for s in sites}
    opened: dict[str, SiteData] = {}
    done, failed = [], []
    for x in missing:
        if x.damaged:
            failed.append({"task": x.task, "attempt": x.attempt, "site": x.site, "error": x.why})
            continue
        dest = os.path.join(run["results"], task_folder(x.task, bag.count))
        try:
            if x.site not in opened:
                opened[x.site] = SiteData(open_site(by_name[x.site]), row["run_key"])
            got = opened[x.site].fetch(x.pilot, x.task, x.attempt, x.outputs, dest)
        except (ReselError, OSError, KeyError) as exc:
            why = str(exc)
            if "gone from the site" in why and not _options.keep_remote:
                why += " (a task's folder is removed once its outputs are home; `resel run --keep-remote` keeps it)"
            failed.append({"task": x.task, "attempt": x.attempt, "site": x.site, "error": why})
            continue
        with store.atomic():
            store["task_outputs"].delete_where("run_id = ? and task = ?", [run_id, x.task])
            store["task_outputs"].insert_all(
                [{"run_id": run_id, "task": x.task, "attempt": x.attempt, "site": x.site, "name": f.name,
                  "size": f.size, "sha256": f.sha256, "path": f.path, "fetched": None, "seconds": f.seconds}
                 for f in got])
        done.append({"task": x.task, "attempt": x.attempt, "site": x.site, "files": len(got)})
    for data in opened.values():
        data.psite.transport.close()
    if as_json:
        doc = {"run": run_id, "fetched": done, "failed": failed}
        if failed:
            fail_json(doc, f"run {run_id}: the outputs of {len(failed):,} task(s) could not be fetched",
                      "each entry of `failed` says why")
        print_json(doc)
        return
    else:
        c.out.print(f"run {run_id}: fetched the outputs of {len(done):,} task(s)"
                    + (f"; {len(failed):,} could not be fetched:" if failed else "; every output is home"),
                    soft_wrap=True)
        names = task_names(run["bag_spec"])
        for f in failed:
            named = f" {m(repr(names[f['task']]))}" if names is not None and 0 <= f["task"] < len(names) else ""
            c.err.print(f"  task {f['task']}{named} (attempt {f['attempt']} on {m(f['site'])}): {m(f['error'])}",
                        soft_wrap=True)
    if failed:
        sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(results_cmd)
    cli.add_command(fetch_cmd)
