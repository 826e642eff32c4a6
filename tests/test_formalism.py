"""Tests of resel.formalism: the Sec. 3.1 data model, Alg. 1-3, eq. 3.1 and the LIM instantiation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resel.formalism import (
    Capability,
    Consumable,
    FTask,
    Instruction,
    Requirement,
    Resource,
    affinities,
    cost,
    lim_resource,
    lim_task,
    neg_cost_affinity,
    res_select,
    satisfy_req,
    satisfy_task,
    top_k,
    viable,
    workload_executable,
)

X86 = Consumable.of("compute", ISA="x86")
DISK = Consumable.of("io", medium="disk")


def req(c: Consumable, amount: float = 1.0) -> Requirement:
    return Requirement(c, amount)


def cap(c: Consumable, rate: float = 1.0) -> Capability:
    return Capability(c, rate)


def task(name: str, *instructions: list[Requirement]) -> FTask:
    return FTask(name, tuple(Instruction(tuple(i)) for i in instructions))


# --- data model ------------------------------------------------------------------------------


def test_consumable_form_is_sorted_pairs_of_frozensets():
    """The form is stored as attr-sorted (attr, frozenset) pairs, scalars becoming singletons."""
    c = Consumable.of("compute", b=["y", "z"], a="x")
    assert c.form == (("a", frozenset({"x"})), ("b", frozenset({"y", "z"})))


def test_consumable_equality_ignores_condition_order_and_is_hashable():
    """Two consumables written with conditions in different orders are equal and hash equally."""
    c1 = Consumable("compute", {"ISA": {"x86"}, "os": ["linux"]})
    c2 = Consumable.of("compute", os="linux", ISA={"x86"})
    assert c1 == c2 and hash(c1) == hash(c2)


def test_consumable_string_value_is_not_split_into_characters():
    """A string condition is one value, not a set of its characters."""
    assert Consumable.of("compute", ISA="x86").conditions == {"ISA": frozenset({"x86"})}


def test_consumable_rejects_empty_condition():
    """A condition with no allowed values can never be satisfied, so it is refused."""
    with pytest.raises(ValueError):
        Consumable.of("compute", ISA=[])


def test_consumable_rejects_boolean_values():
    """Booleans are refused because True == 1 would make them match numbers."""
    with pytest.raises(TypeError):
        Consumable.of("compute", smt=True)


@pytest.mark.parametrize("amount", [0, -1.0, math.nan, math.inf])
def test_requirement_amount_must_be_positive_finite(amount):
    """A requirement amount <= 0 (or non-finite) raises ValueError."""
    with pytest.raises(ValueError):
        Requirement(X86, amount)


@pytest.mark.parametrize("rate", [0, -2.5, math.nan])
def test_capability_rate_must_be_positive(rate):
    """A capability rate <= 0 (or NaN) raises ValueError."""
    with pytest.raises(ValueError):
        Capability(X86, rate)


def test_resource_rejects_duplicate_consumable():
    """Two capabilities offering the same type+form on one resource raise ValueError."""
    with pytest.raises(ValueError):
        Resource("r", (cap(X86, 1.0), cap(Consumable.of("compute", ISA={"x86"}), 2.0)))


def test_resource_accepts_same_type_with_different_form():
    """Capabilities of one type but different forms are distinct consumables."""
    r = Resource("r", [cap(X86), cap(Consumable.of("compute", ISA="arm"))])
    assert len(r.capabilities) == 2 and isinstance(r.capabilities, tuple)


# --- Alg. 1 ----------------------------------------------------------------------------------


def test_satisfy_req_true_when_type_equal_and_conditions_intersect():
    """Same type and an overlapping value set satisfy the requirement."""
    r = req(Consumable.of("compute", ISA=["x86", "x86_64"]))
    assert satisfy_req(r, cap(Consumable.of("compute", ISA="x86_64", os="linux")))


def test_satisfy_req_false_on_type_mismatch():
    """Different consumable types never match, even with identical forms."""
    assert not satisfy_req(req(Consumable.of("compute", ISA="x86")), cap(Consumable.of("gpu", ISA="x86")))


def test_satisfy_req_false_when_attribute_missing():
    """A requirement condition whose attribute the capability lacks fails."""
    assert not satisfy_req(req(Consumable.of("compute", ISA="x86", os="linux")), cap(X86))


def test_satisfy_req_false_on_empty_intersection():
    """Disjoint value sets for an attribute fail."""
    assert not satisfy_req(req(X86), cap(Consumable.of("compute", ISA=["arm", "ppc"])))


def test_satisfy_req_numbers_compare_numerically():
    """An int condition 1 matches a float offer 1.0."""
    assert satisfy_req(req(Consumable.of("compute", cores=1)), cap(Consumable.of("compute", cores=1.0)))


def test_satisfy_req_string_never_matches_number():
    """The string "1" does not match the number 1."""
    assert not satisfy_req(req(Consumable.of("compute", cores="1")), cap(Consumable.of("compute", cores=1)))


def test_satisfy_req_strings_compare_exactly():
    """String comparison is exact (case-sensitive)."""
    assert not satisfy_req(req(Consumable.of("compute", ISA="X86")), cap(X86))


def test_satisfy_req_extra_capability_conditions_are_ignored():
    """A requirement with no conditions is served by any capability of its type."""
    assert satisfy_req(req(Consumable("compute")), cap(X86))


# --- Alg. 2, viable set, workload --------------------------------------------------------------


def test_satisfy_task_true_when_every_requirement_is_served():
    """A resource serving both instructions' requirements is viable."""
    t = task("t", [req(X86)], [req(DISK)])
    assert satisfy_task(Resource("r", (cap(X86), cap(DISK))), t)


def test_satisfy_task_false_when_one_requirement_unserved():
    """A resource missing the consumable of one instruction is not viable."""
    t = task("t", [req(X86)], [req(DISK)])
    assert not satisfy_task(Resource("r", (cap(X86),)), t)


def test_viable_keeps_input_order():
    """The viable set lists viable resources in the order given."""
    a, b, c = (Resource(n, (cap(X86),)) for n in "abc")
    arm = Resource("arm", (cap(Consumable.of("compute", ISA="arm")),))
    assert viable([c, arm, a, b], task("t", [req(X86)])) == [c, a, b]


def test_workload_executable_false_when_one_task_has_no_viable_resource():
    """The workload is executable only if every task has a viable resource."""
    pool = [Resource("x", (cap(X86),))]
    assert workload_executable(pool, [task("t1", [req(X86)])])
    assert not workload_executable(pool, [task("t1", [req(X86)]), task("t2", [req(DISK)])])


# --- eq. 3.1 ---------------------------------------------------------------------------------


def test_cost_sums_amount_over_rate_across_instructions():
    """3e9 cycles at 1.5e9/s plus 10 GB at 2 GB/s cost 2 + 5 = 7."""
    res = Resource("r", (cap(X86, 1.5e9), cap(DISK, 2.0)))
    t = task("t", [req(X86, 3e9)], [req(DISK, 10.0)])
    assert cost(t, res) == 7.0


def test_cost_is_inf_when_not_viable():
    """A requirement without a matching capability makes the cost infinite."""
    t = task("t", [req(X86, 3e9)], [req(DISK, 10.0)])
    assert cost(t, Resource("r", (cap(X86, 1.5e9),))) == math.inf


def test_cost_charges_one_capability_per_requirement():
    """When two capabilities match, only the first in resource order is charged (no double count)."""
    wide = Consumable.of("compute", ISA=["x86", "arm"])
    t = task("t", [req(X86, 8.0)])
    assert cost(t, Resource("r", (cap(X86, 2.0), cap(wide, 4.0)))) == 4.0  # not 4 + 2
    assert cost(t, Resource("r", (cap(wide, 4.0), cap(X86, 2.0)))) == 2.0


def test_cost_of_task_without_requirements_is_zero():
    """An empty task costs nothing anywhere."""
    assert cost(FTask("empty"), Resource("r")) == 0.0


# --- Alg. 3 and extensions -------------------------------------------------------------------


def test_res_select_picks_highest_affinity():
    """The candidate with the largest affinity wins."""
    assert res_select(["a", "b", "c"], {"a": 1.0, "b": 3.0, "c": 2.0}.__getitem__) == "b"


def test_res_select_tie_goes_to_first():
    """Equal best affinities select the first such candidate in iteration order."""
    assert res_select(["a", "b", "c"], {"a": 1.0, "b": 5.0, "c": 5.0}.__getitem__) == "b"


def test_res_select_empty_is_none():
    """No candidates select nothing."""
    assert res_select([], lambda x: 0.0) is None


def test_res_select_never_picks_minus_infinity():
    """A candidate with affinity -inf (non-viable under -cost) is never selected, as in Alg. 3."""
    assert res_select(["a", "b"], lambda x: -math.inf) is None


def test_top_k_orders_descending_and_breaks_ties_by_input_order():
    """top_k lists the best first and keeps input order among equal affinities."""
    aff = {"a": 1.0, "b": 3.0, "c": 3.0, "d": 2.0, "e": 3.0}
    assert top_k(list("abcde"), aff.__getitem__, 4) == ["b", "c", "e", "d"]


def test_top_k_returns_fewer_when_k_exceeds_candidates():
    """Asking for more than there are returns all qualifying candidates."""
    assert top_k(["a", "b"], {"a": 1.0, "b": 2.0}.__getitem__, 5) == ["b", "a"]


def test_top_k_rejects_k_below_one():
    """k < 1 raises ValueError."""
    with pytest.raises(ValueError):
        top_k(["a"], lambda x: 0.0, 0)


def test_affinities_in_input_order():
    """affinities pairs each candidate with its affinity, in input order."""
    assert affinities(["a", "b"], {"a": 2.0, "b": 1.0}.__getitem__) == [("a", 2.0), ("b", 1.0)]


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1))
def test_res_select_returns_first_argmax(values):
    """res_select returns the first index whose affinity equals the max of all affinities."""
    chosen = res_select(range(len(values)), values.__getitem__)
    assert chosen is not None
    assert values[chosen] == max(values)
    assert all(values[i] < values[chosen] for i in range(chosen))
    assert top_k(range(len(values)), values.__getitem__, 1) == [chosen]


# --- LIM -------------------------------------------------------------------------------------


def test_lim_cost_is_instructions_over_clock():
    """2.3e9 instructions at 2.3 GHz take 1.0 s (eq. 3.2)."""
    assert cost(lim_task("t", 2.3e9), lim_resource("bridges", 2.3)) == pytest.approx(1.0)


def test_lim_instantiation_shape():
    """A LIM resource offers cycles {"compute", {"ISA": {isa}}} at clock*1e9; a LIM task needs them."""
    res = lim_resource("comet", 2.5)
    t = lim_task("t", 5e9)
    cycle = Consumable("compute", {"ISA": {"x86"}})
    assert res.capabilities == (Capability(cycle, 2.5e9),)
    assert t.requirements == (Requirement(cycle, 5e9),)


def test_lim_isa_mismatch_is_not_viable():
    """A task built for another ISA costs inf on an x86 LIM resource."""
    assert cost(lim_task("t", 1e9, isa="arm"), lim_resource("r", 2.0)) == math.inf


def test_lim_rejects_non_positive_clock():
    """A zero clock is refused."""
    with pytest.raises(ValueError):
        lim_resource("r", 0.0)


def test_neg_cost_affinity_selects_fastest_clock_first_on_tie():
    """LIM affinity picks the highest clock; the 2.5 GHz tie (Comet vs OSG) goes to the first."""
    t = lim_task("t", 1e11)
    bridges, comet, osg = lim_resource("bridges", 2.3), lim_resource("comet", 2.5), lim_resource("osg", 2.5)
    supermic = lim_resource("supermic", 2.8)
    aff = neg_cost_affinity(t)
    assert aff(comet) == pytest.approx(-40.0)
    assert res_select([bridges, comet, osg], aff) is comet
    assert res_select([bridges, osg, comet], aff) is osg
    assert res_select([bridges, comet, osg, supermic], aff) is supermic
