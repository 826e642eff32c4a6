"""The big-bag harness's own arithmetic (benchmarks/bench_scale.py, issue 29 §2): the figures
it prints are only as good as the windows, quantiles and cycles it computes from the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_scale  # noqa: E402


def test_sustained_is_the_median_full_window_and_overall_counts_the_whole_life():
    # windows of 10 s from the first end (100.0): [100, 110) holds 5, [110, 120) 20, [120, 130) 30,
    # and the last, partial window [130, 140) holds 1, which the median leaves out
    ends = [100.0 + i * 2 for i in range(5)] + [110.0 + i * 0.5 for i in range(20)] \
        + [120.0 + i / 3 for i in range(30)] + [131.0]
    out = bench_scale.rates(ends, 10.0, len(ends), elapsed=56.0)
    assert out["windows"] == [0.5, 2.0, 3.0, 0.1]
    assert out["sustained"] == 2.0                      # median of 0.5, 2.0, 3.0
    assert out["peak_window"] == 3.0
    assert out["overall"] == pytest.approx(56 / 56.0)
    assert out["over_span"] == pytest.approx(56 / 31.0)


def test_no_completion_gives_no_rate():
    assert bench_scale.rates([], 10.0, 5, 3.0)["sustained"] is None


def test_the_poll_cycle_is_the_slowest_site_and_a_site_poll_the_longer_of_its_two_halves():
    # (site, role, kind, submitted, began, seconds): site a's scheduler polls take 0.1 s and its
    # reads 0.3 s; site b's polls 0.2 s and reads 0.05 s: a's poll is 0.3, b's 0.2, the cycle 0.3
    jobs = []
    for i in range(5):
        jobs.append(("a", "scheduler", "poll", i * 0.5, i * 0.5, 0.1))
        jobs.append(("a", "files", "read", i * 0.5, i * 0.5 + 0.01, 0.3))
        jobs.append(("b", "scheduler", "poll", i * 0.5, i * 0.5, 0.2))
        jobs.append(("b", "files", "read", i * 0.5, i * 0.5, 0.05))
    jobs.append(("a", "files", "act", 0.0, 0.0, 0.02))
    out = bench_scale.poll_figures(jobs, 0.0)
    assert out["poll_cycle_p50"] == pytest.approx(0.3)
    assert out["poll_sites"]["b"]["poll_p50"] == pytest.approx(0.2)
    assert out["poll_sites"]["a"]["read_wait_p50"] == pytest.approx(0.01)
    assert out["poll_sites"]["a"]["read_period_p50"] == pytest.approx(0.5)
    assert out["poll_sites"]["a"]["jobs"] == {"poll": 5, "read": 5, "act": 1}


def test_quantiles_by_rank():
    values = [float(v) for v in range(1, 101)]          # 1 .. 100
    assert bench_scale._q(values, 0.5) == 51.0          # the value at rank int(0.5 * 100) = 50 (0-based)
    assert bench_scale._q(values, 0.95) == 96.0
    assert bench_scale._q([], 0.5) is None


def test_status_figures_keep_each_sample_s_own_cpu_beside_its_wall_time():
    # (at, wall s, exit code, own CPU s): the second sample waited 0.9 s for a core
    samples = [(10.0, 0.3, 0, 0.25), (15.0, 1.1, 0, 0.2), (20.0, 0.4, 1, 0.3)]
    out = bench_scale.status_figures(samples)
    assert out["status_series"] == [(0.0, 0.3, 0.25), (5.0, 1.1, 0.2), (10.0, 0.4, 0.3)]
    assert out["status_max"] == 1.1 and out["status_cpu_max"] == 0.3
    assert out["status_failed"] == 1 and out["status_samples"] == 3


def test_the_census_gives_an_agent_s_tasks_apart_and_its_wait_for_a_core(tmp_path):
    # a real process classed as an agent (its command line names resel-agent-v) runs a child
    # that burns ~0.3 s of CPU and reaps it, then lives on: the child ends between two samples,
    # so only the agent's reaped children's figure (cutime + cstime) can count it
    import subprocess
    import time
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    script = ("import subprocess, sys, time\n"
              f"subprocess.run([sys.executable, '-c', {burn!r}])\n"
              "print('reaped', flush=True)\ntime.sleep(30)\n")
    agent = subprocess.Popen([sys.executable, "-c", script, "resel-agent-vtest"], stdout=subprocess.PIPE, text=True)
    try:
        sampler = bench_scale.Sampler(agent.pid, tmp_path / "no.db", status_every=1e9)
        assert agent.stdout.readline().strip() == "reaped"
        sampler.sample()
        sampler.ticks1 = bench_scale.machine_ticks()
        m = sampler.cpu_census()
    finally:
        agent.kill()
        agent.wait()
    assert 0.25 <= m["tasks"] <= 1.0           # the child's 0.3 s, counted once
    assert m["by_kind"]["agents"] < 0.25        # not among the agent's own
    assert m["run_queue_s"]["agents"] >= 0.0
    assert m["steal_s"] >= 0.0 and m["busy_cpu_s"] <= m["cpu_s_available"]
    assert m["unattributed_besides_tasks"] == pytest.approx(m["unattributed"] - m["tasks"])
