"""The consumable/capability formalism of Ha (2018), Sec. 3.1 and 3.3 (seeds/003 §1, §3.1).

A *task* needs consumables (``Requirement``: how much of which consumable), a *resource*
offers consumables at a rate (``Capability``: how much per unit of cost). From those two
pictures the thesis derives everything selection needs:

* whether a resource can run a task at all (Alg. 1 ``satisfy_req``, Alg. 2 ``satisfy_task``),
* how much it costs there (eq. 3.1 ``cost``),
* which resource to pick (Alg. 3 ``res_select``, plus the top-k extension of Ch. 5).

The Limited Information Model (LIM) is one instantiation (``lim_resource``/``lim_task``): a
single "compute" consumable whose amount is the cycle count and whose rate is the clock, so
that the cost is eq. 3.2, ``T_x = cycles / clock``.

The module is pure (no I/O, no global state) and every value is an immutable, hashable frozen
dataclass, so the same objects can be shared by the model, the engine and the simulator, and
used as dict keys or set members.

Matching semantics. Eq. 3.1 matches a requirement to a capability by *equality* of
consumables, while Alg. 1 uses type equality plus non-empty intersection of each condition.
The thesis does not reconcile the two; this module uses the Alg. 1 semantics everywhere
(``cost`` included), so "viable" and "has a finite cost" always agree.

Value comparison. Condition values may be strings or real numbers (``int``, ``float``,
``fractions.Fraction``), as in JSDL and ClassAd. Comparison is type-aware: numbers compare
numerically (``1`` matches ``1.0``), strings exactly and case-sensitively, and a string never
matches a number (``"1"`` does not match ``1``). Python's set semantics give exactly that,
because equal numbers hash equally. Booleans are rejected: Python treats ``True == 1``, which
would silently make a flag match a count; spell flags as strings (``"yes"``/``"no"``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

__all__ = [
    "Value",
    "FormPairs",
    "Consumable",
    "Requirement",
    "Instruction",
    "FTask",
    "Capability",
    "Resource",
    "satisfy_req",
    "satisfy_task",
    "viable",
    "workload_executable",
    "cost",
    "res_select",
    "top_k",
    "affinities",
    "LIM_TYPE",
    "LIM_ATTR",
    "lim_cycle",
    "lim_resource",
    "lim_task",
    "neg_cost_affinity",
]

T = TypeVar("T")

Value = str | int | float
"""A condition value: a string or a real number (bool excluded, see the module docstring)."""

FormPairs = tuple[tuple[str, frozenset[Value]], ...]
"""The canonical, hashable form: ``(attr, allowed values)`` pairs sorted by ``attr``."""


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_value(attr: str, value: Any) -> Value:
    """Accept only values whose comparison semantics are defined (strings, real numbers)."""
    if isinstance(value, bool):
        raise TypeError(
            f"condition {attr!r}: boolean {value!r} is not allowed because True == 1 in Python "
            "would make it match numbers; use a string such as 'yes'/'no'"
        )
    if isinstance(value, str | numbers.Real):
        return value  # type: ignore[return-value]
    raise TypeError(
        f"condition {attr!r}: value {value!r} of type {type(value).__name__} is not a string "
        "or a real number"
    )


def _value_set(attr: str, values: Any) -> frozenset[Value]:
    """Turn a scalar or a collection of values into the frozenset a condition is stored as.

    A string is a single value, never an iterable of characters.
    """
    if isinstance(values, str | numbers.Real):
        items: Iterable[Any] = (values,)
    elif isinstance(values, Iterable):
        items = values
    else:
        items = (values,)  # rejected with a clear message by _check_value
    result = frozenset(_check_value(attr, v) for v in items)
    if not result:
        raise ValueError(
            f"condition {attr!r} has no allowed values, so nothing could ever satisfy it"
        )
    return result


def _positive_finite(what: str, x: Any) -> float:
    """Amounts and rates must be positive and finite: eq. 3.1 divides by rates and sums amounts."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{what} must be a real number, not {type(x).__name__}")
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{what} must be a positive finite number, got {x!r}")
    return x  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Data model (Sec. 3.1)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Consumable:
    """A kind of work plus the conditions under which it is offered or needed: ``{type, form}``.

    ``type`` names the kind of work (e.g. ``"compute"``). ``form`` holds ``(attr, cond)``
    pairs where ``attr`` is unique and ``cond`` is the *set* of acceptable values, so a
    requirement can say "ISA x86 or x86_64" and a capability "ISA x86_64".

    The constructor accepts ``form`` as a mapping ``attr -> values`` (or as pairs) and stores it
    as a tuple of ``(attr, frozenset)`` pairs sorted by ``attr``; that makes consumables
    hashable and makes equality independent of the order the conditions were written in.

    Args:
        type: The kind of work; compared exactly.
        form: Mapping (or pairs) from attribute name to its allowed values. A scalar value is
            taken as a one-element set.

    Raises:
        ValueError: An attribute appears twice or has no allowed values.
        TypeError: A value is neither a string nor a real number (booleans included).
    """

    type: str
    form: FormPairs | Mapping[str, Any] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise ValueError(f"consumable type must be a non-empty string, got {self.type!r}")
        raw = self.form
        pairs = list(raw.items()) if isinstance(raw, Mapping) else list(raw)
        seen: dict[str, frozenset[Value]] = {}
        for attr, values in pairs:
            if not isinstance(attr, str):
                raise TypeError(f"attribute names must be strings, got {attr!r}")
            if attr in seen:
                raise ValueError(f"attribute {attr!r} appears twice in the form of {self.type!r}")
            seen[attr] = _value_set(attr, values)
        object.__setattr__(self, "form", tuple(sorted(seen.items(), key=itemgetter(0))))

    @classmethod
    def of(cls, type: str, **form: Any) -> Consumable:
        """Build a consumable from keyword conditions, e.g. ``Consumable.of("compute", ISA="x86")``.

        Each keyword value may be a scalar, a list, a tuple or a set; attribute names that are
        not Python identifiers need the main constructor with a mapping.
        """
        return cls(type, form)

    @property
    def conditions(self) -> dict[str, frozenset[Value]]:
        """The form as a fresh ``attr -> allowed values`` dict, for lookups."""
        return dict(self.form)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Requirement:
    """A fixed amount of one consumable that a task needs: ``(c, amt)`` with ``amt > 0``.

    Raises:
        ValueError: ``amount`` is not positive and finite.
    """

    consumable: Consumable
    amount: float

    def __post_init__(self) -> None:
        if not isinstance(self.consumable, Consumable):
            raise TypeError(f"consumable must be a Consumable, got {type(self.consumable).__name__}")
        _positive_finite("requirement amount", self.amount)


@dataclass(frozen=True, slots=True)
class Instruction:
    """A set of requirements consumed together, one step of a task.

    Stored as a tuple (any iterable is accepted) so that iteration, and therefore the order
    of floating-point sums in :func:`cost`, is reproducible.
    """

    requirements: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        reqs = tuple(self.requirements)
        for r in reqs:
            if not isinstance(r, Requirement):
                raise TypeError(f"instruction items must be Requirement, got {type(r).__name__}")
        object.__setattr__(self, "requirements", reqs)


@dataclass(frozen=True, slots=True)
class FTask:
    """A task of the formalism: a named sequence of instructions executed in order.

    Named ``FTask`` so it does not clash with the run-time task types of the engine.
    """

    name: str
    instructions: tuple[Instruction, ...] = ()

    def __post_init__(self) -> None:
        ins = tuple(self.instructions)
        for i in ins:
            if not isinstance(i, Instruction):
                raise TypeError(f"task items must be Instruction, got {type(i).__name__}")
        object.__setattr__(self, "instructions", ins)

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """All requirements of all instructions in order ("task requirements" of Sec. 3.1)."""
        return tuple(r for ins in self.instructions for r in ins.requirements)


@dataclass(frozen=True, slots=True)
class Capability:
    """A consumable a resource offers at a fixed rate: ``{c, rate}`` with ``rate > 0``.

    ``rate`` is consumables per unit of cost; the unit (seconds, SUs, currency, joules) is
    whatever the caller means, and :func:`cost` returns the same unit.

    Raises:
        ValueError: ``rate`` is not positive and finite.
    """

    consumable: Consumable
    rate: float

    def __post_init__(self) -> None:
        if not isinstance(self.consumable, Consumable):
            raise TypeError(f"consumable must be a Consumable, got {type(self.consumable).__name__}")
        _positive_finite("capability rate", self.rate)


@dataclass(frozen=True, slots=True)
class Resource:
    """A named set of capabilities, each offering a unique consumable (type + form).

    Capabilities keep their given order: when several of them match one requirement under the
    Alg. 1 semantics, :func:`cost` charges the first, so the order is part of the model.

    Raises:
        ValueError: Two capabilities offer the same consumable; eq. 3.1 would then be ambiguous.
    """

    name: str
    capabilities: tuple[Capability, ...] = ()

    def __post_init__(self) -> None:
        caps = tuple(self.capabilities)
        seen: set[Consumable] = set()
        for cap in caps:
            if not isinstance(cap, Capability):
                raise TypeError(f"resource items must be Capability, got {type(cap).__name__}")
            if cap.consumable in seen:
                raise ValueError(
                    f"resource {self.name!r} offers consumable {cap.consumable!r} twice; "
                    "each capability must offer a unique consumable"
                )
            seen.add(cap.consumable)
        object.__setattr__(self, "capabilities", caps)


# --------------------------------------------------------------------------------------------
# Adapted Matchmaking Algorithm (Sec. 3.3)
# --------------------------------------------------------------------------------------------


def satisfy_req(req: Requirement, cap: Capability) -> bool:
    """Alg. 1: can ``cap`` serve ``req``?

    True iff the consumable types are equal and, for every condition of the requirement, the
    capability has the same attribute with at least one value in common. Conditions the
    capability has but the requirement does not mention are ignored: a requirement only
    constrains what it names. Values compare type-aware (see the module docstring).
    """
    if req.consumable.type != cap.consumable.type:
        return False
    offered = cap.consumable.conditions
    for attr, cond in req.consumable.form:
        have = offered.get(attr)
        if have is None or have.isdisjoint(cond):
            return False
    return True


def _matching_capability(req: Requirement, res: Resource) -> Capability | None:
    """The first capability of ``res`` that satisfies ``req``, or None."""
    for cap in res.capabilities:
        if satisfy_req(req, cap):
            return cap
    return None


def satisfy_task(res: Resource, task: FTask) -> bool:
    """Alg. 2: is ``res`` viable for ``task``, i.e. is every requirement served by some capability?"""
    return all(_matching_capability(req, res) is not None for req in task.requirements)


def viable(resources: Iterable[Resource], task: FTask) -> list[Resource]:
    """The viable resource set of ``task``, in input order (so later selection is deterministic)."""
    return [res for res in resources if satisfy_task(res, task)]


def workload_executable(resources: Iterable[Resource], tasks: Iterable[FTask]) -> bool:
    """True iff every task has at least one viable resource (an empty workload is executable)."""
    pool = tuple(resources)
    return all(any(satisfy_task(res, t) for res in pool) for t in tasks)


def cost(task: FTask, res: Resource) -> float:
    """Eq. 3.1: the cost ``K`` of running ``task`` on ``res``, in the unit of the rates.

    ``K = sum over requirements of amount / rate`` of the capability serving it. Matching
    uses Alg. 1 (:func:`satisfy_req`) rather than the equation's literal consumable equality,
    so cost and viability never disagree. Under Alg. 1 several distinct capabilities may match
    one requirement (e.g. ISA ``{x86}`` and ``{x86, arm}``); each requirement is charged once,
    to the first matching capability in the resource's order, never to all of them.

    Returns:
        The cost as a float; ``math.inf`` when some requirement has no matching capability
        (the resource is not viable). A task without requirements costs 0.
    """
    terms: list[float] = []
    for req in task.requirements:
        cap = _matching_capability(req, res)
        if cap is None:
            return math.inf
        terms.append(req.amount / cap.rate)
    return math.fsum(terms)


def res_select(candidates: Iterable[T], affinity: Callable[[T], float]) -> T | None:
    """Alg. 3: the candidate with the highest affinity.

    Implemented literally: start from ``best = -inf`` and replace only on a strictly greater
    affinity. Hence ties go to the first candidate in iteration order (deterministic, which
    matters because uncorrected LIM ties Comet and OSG), and a candidate whose affinity is
    ``-inf`` or NaN is never selected (``-inf`` is what :func:`neg_cost_affinity` gives a
    non-viable resource). ``affinity`` is called once per candidate.

    Returns:
        The selected candidate, or None when there are no candidates or none has an affinity
        above ``-inf``.
    """
    best_item: T | None = None
    best = -math.inf
    for item in candidates:
        v = affinity(item)
        if v > best:
            best, best_item = v, item
    return best_item


def affinities(candidates: Iterable[T], affinity: Callable[[T], float]) -> list[tuple[T, float]]:
    """Every candidate with its affinity, in input order (the "full list" extension of Ch. 5)."""
    return [(item, affinity(item)) for item in candidates]


def top_k(candidates: Iterable[T], affinity: Callable[[T], float], k: int) -> list[T]:
    """The ``k`` best candidates by affinity, best first (the top-k extension of Ch. 5).

    Ties keep input order (stable sort), matching :func:`res_select`'s tie-breaking, and like
    it candidates with affinity ``-inf`` or NaN are left out, so ``top_k(c, a, 1)`` is
    ``[res_select(c, a)]`` or ``[]``. Fewer than ``k`` items are returned when fewer qualify.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k!r}")
    scored = [(item, v) for item, v in affinities(candidates, affinity) if v > -math.inf]
    scored.sort(key=itemgetter(1), reverse=True)  # reverse=True keeps ties in input order
    return [item for item, _ in scored[:k]]


# --------------------------------------------------------------------------------------------
# LIM instantiation (Sec. 3.2)
# --------------------------------------------------------------------------------------------

LIM_TYPE = "compute"
"""Consumable type of the LIM cycle."""

LIM_ATTR = "ISA"
"""The one condition of the LIM cycle: the instruction-set architecture."""


def lim_cycle(isa: str = "x86") -> Consumable:
    """The LIM consumable ``cycle = {"compute", {"ISA": {isa}}}``."""
    return Consumable(LIM_TYPE, {LIM_ATTR: frozenset({isa})})


def lim_resource(name: str, clock_ghz: float, isa: str = "x86") -> Resource:
    """A LIM resource: one cycle capability at ``clock_ghz * 1e9`` cycles per second.

    Raises:
        ValueError: ``clock_ghz`` is not positive and finite.
    """
    _positive_finite("clock_ghz", clock_ghz)
    return Resource(name, (Capability(lim_cycle(isa), clock_ghz * 1e9),))


def lim_task(name: str, instructions: float, isa: str = "x86") -> FTask:
    """A LIM task: one instruction requiring ``instructions`` cycles.

    LIM assumes one instruction per cycle (eq. 3.5), so the baseline's retired-instruction
    count is the cycle requirement, and ``cost(lim_task, lim_resource)`` is eq. 3.2,
    ``instructions / (clock_ghz * 1e9)`` seconds.

    Raises:
        ValueError: ``instructions`` is not positive and finite.
    """
    return FTask(name, (Instruction((Requirement(lim_cycle(isa), instructions),)),))


def neg_cost_affinity(task: FTask) -> Callable[[Resource], float]:
    """LIM's affinity for ``task``: ``res -> -cost(task, res)``.

    Alg. 3 maximises affinity while LIM wants the lowest predicted ``T_x``, hence the sign.
    A non-viable resource gets ``-inf`` and is therefore never picked by :func:`res_select`.
    """

    def affinity(res: Resource) -> float:
        return -cost(task, res)

    return affinity
