"""The transfer model (resel/transfer.py): D(x) = own_in/bw_in + out/bw_out (+ shared/bw_in while
x is cold), from a bag file's sizes or from what a live run measured; figures by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from conftest import make_bag, make_site
from resel.domain import Bandwidth, DataSpec, Truth
from resel.models.distributions import Dist
from resel.transfer import DEFAULT_BANDWIDTH, MB, DataTimes, TransferModel


def with_data(bag, **sizes):
    return dataclasses.replace(bag, data=DataSpec(**sizes))


def test_data_time_by_definition():
    """own 50 MB, shared 200 MB, out 400 MB over 25 MB/s in and 8 MB/s out:
    2 + 50 + 8 s cold, 2 + 50 s warm."""
    m = TransferModel(50 * MB, 200 * MB, 400 * MB, {"x": Bandwidth(25.0, 8.0)})
    assert m.times("x") == DataTimes(2.0, 8.0, 50.0)
    assert m.seconds("x") == 60.0 and m.seconds("x", cold=False) == 52.0
    # a site with no figure moves at the default, 100 MB/s both ways
    assert DEFAULT_BANDWIDTH == Bandwidth(100.0, 100.0)
    assert m.times("elsewhere") == DataTimes(0.5, 2.0, 4.0)


def test_from_bag_reads_the_bag_data_sizes_and_the_sites_bandwidth():
    """[bag.data] input_mb 10, shared_mb 40, output_mb 30; site a states 20 MB/s both ways, b
    states nothing (default 100): D(a) = 0.5 + 2 + 1.5 = 4, D(b) = 0.1 + 0.4 + 0.3 = 0.8."""
    a = dataclasses.replace(make_site("a", 2.0), bandwidth=Bandwidth(20.0, 20.0))
    b = make_site("b", 2.0)
    m = TransferModel.from_bag(with_data(make_bag(3), input_mb=10.0, shared_mb=40.0, output_mb=30.0), [a, b])
    assert m.seconds("a") == pytest.approx(4.0) and m.seconds("b") == pytest.approx(0.8)
    assert m.seconds("a", cold=False) == pytest.approx(2.0)


def test_from_bag_with_truth_prefers_the_simulated_truth():
    """truth.bandwidth (how fast files really move) wins over bandwidth (what is priced) for
    the simulator; a site whose truth states none falls back to its bandwidth."""
    truth = Truth(1.0, Dist.fixed(1.0), Dist.fixed(2.0), bandwidth=Bandwidth(5.0, 5.0))
    a = dataclasses.replace(make_site("a", 2.0), bandwidth=Bandwidth(50.0, 50.0), truth=truth)
    b = dataclasses.replace(make_site("b", 2.0), bandwidth=Bandwidth(10.0, 10.0),
                            truth=Truth(1.0, Dist.fixed(1.0), Dist.fixed(2.0)))
    bag = with_data(make_bag(1), output_mb=100.0)
    assert TransferModel.from_bag(bag, [a, b]).seconds("a") == 2.0
    true = TransferModel.from_bag(bag, [a, b], truth=True)
    assert (true.seconds("a"), true.seconds("b")) == (20.0, 10.0)


def test_a_bag_that_moves_nothing_has_no_model():
    site = make_site("a", 2.0)
    assert TransferModel.from_bag(make_bag(1), [site]) is None                     # no [bag.data]
    assert TransferModel.from_bag(with_data(make_bag(1)), [site]) is None          # outputs declared, no sizes
    assert TransferModel.from_bag(with_data(make_bag(1), output_mb=0.0), [site]) is None
    assert TransferModel.measured([site], own_input_bytes=[0, 0], shared_bytes=0, output_bytes=0) is None


def test_measured_prices_the_mean_of_the_tasks_own_inputs():
    """Three tasks with 1, 2 and 6 MB of their own inputs: 3 MB each; 9 MB shared; outputs
    12 MB; a probe measured 3 MB/s in, 4 out for site a (its sites-file 100 MB/s loses):
    D(a) = 1 + 3 + 3 = 7."""
    a = dataclasses.replace(make_site("a", 2.0), bandwidth=Bandwidth(100.0, 100.0))
    m = TransferModel.measured([a], own_input_bytes=[1 * MB, 2 * MB, 6 * MB], shared_bytes=9 * MB,
                               output_bytes=12 * MB, bandwidth={"a": Bandwidth(3.0, 4.0)})
    assert m.own_in_bytes == 3 * MB
    assert m.times("a") == DataTimes(1.0, 3.0, 3.0) and m.seconds("a") == 7.0
    none = TransferModel.measured([a], own_input_bytes=[], shared_bytes=0, output_bytes=5 * MB)
    assert none.own_in_bytes == 0.0 and none.seconds("a") == pytest.approx(0.05)


def test_with_bandwidth_replaces_only_the_ways_given():
    m = TransferModel(0.0, 0.0, 8 * MB, {"a": Bandwidth(2.0, 4.0)})
    assert m.with_bandwidth("a", outbound=1.0).bandwidth_of("a") == Bandwidth(2.0, 1.0)
    assert m.with_bandwidth("a", inbound=6.0).bandwidth_of("a") == Bandwidth(6.0, 4.0)
    assert m.with_bandwidth("b", inbound=6.0).bandwidth_of("b") == Bandwidth(6.0, DEFAULT_BANDWIDTH.outbound)
    assert m.bandwidth_of("a") == Bandwidth(2.0, 4.0)     # the model itself is unchanged


@pytest.mark.parametrize("bad", [dict(own_in_bytes=-1.0), dict(out_bytes=math.nan), dict(shared_bytes=math.inf),
                                 dict(bandwidth={"a": Bandwidth(0.0, 1.0)}), dict(default=Bandwidth(1.0, -1.0))])
def test_nonsense_is_refused(bad):
    args = dict(own_in_bytes=0.0, shared_bytes=0.0, out_bytes=1.0)
    with pytest.raises(ValueError):
        TransferModel(**{**args, **bad})
