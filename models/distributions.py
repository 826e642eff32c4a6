"""Random distributions for simulated queue waits, clocks and IPC.

One small spec type (:class:`Dist`) is read from TOML tables such as
``{dist = "lognormal", median = 600, sigma = 1.2}`` and sampled with a caller-supplied
``random.Random`` so that every simulation is reproducible from its seed and several can run
side by side (no module-level random state).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

#: parameters each kind takes (required, optional) — also what the config reader checks
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "fixed": (("value",), ()),
    "exponential": (("mean",), ("min", "max")),
    "lognormal": (("median", "sigma"), ("min", "max")),
    "normal": (("mean", "std"), ("min", "max")),
    "uniform": (("low", "high"), ()),
    "empirical": (("samples",), ()),
}


@dataclass(frozen=True, slots=True)
class Dist:
    """A named distribution with its parameters (see :data:`KINDS`)."""

    kind: str
    params: tuple[tuple[str, Any], ...]

    @staticmethod
    def fixed(value: float) -> "Dist":
        return Dist("fixed", (("value", float(value)),))

    @staticmethod
    def of(kind: str, **params: Any) -> "Dist":
        """Build and check a distribution; raises ``ValueError`` with what is wrong."""
        if kind not in KINDS:
            raise ValueError(f"unknown distribution {kind!r}; one of {', '.join(KINDS)}")
        required, optional = KINDS[kind]
        missing = [p for p in required if p not in params]
        if missing:
            raise ValueError(f"{kind} needs {', '.join(missing)}")
        unknown = [p for p in params if p not in required + optional]
        if unknown:
            raise ValueError(f"{kind} takes no {', '.join(unknown)}")
        clean: dict[str, Any] = {}
        for key, value in params.items():
            if key == "samples":
                if not isinstance(value, (list, tuple)) or not value:
                    raise ValueError("samples must be a non-empty list of numbers")
                if any(not _is_number(v) or v < 0 for v in value):
                    raise ValueError("samples must be numbers >= 0")
                clean[key] = tuple(float(v) for v in value)
            else:
                if not _is_number(value):
                    raise ValueError(f"{key} must be a number, not {value!r}")
                clean[key] = float(value)
        for key in ("sigma", "std", "median", "mean"):
            if key in clean and clean[key] < 0:
                raise ValueError(f"{key} must be >= 0")
        if kind == "uniform" and clean["low"] > clean["high"]:
            raise ValueError("uniform needs low <= high")
        if clean.get("min", -math.inf) > clean.get("max", math.inf):
            raise ValueError("min must be <= max")
        return Dist(kind, tuple(sorted(clean.items())))

    def param(self, name: str, default: Any = None) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        return default

    def mean(self) -> float:
        """The distribution's expectation (ignoring clipping): what an oracle would assume."""
        p = dict(self.params)
        if self.kind == "fixed":
            return p["value"]
        if self.kind == "exponential":
            return p["mean"]
        if self.kind == "lognormal":
            return p["median"] * math.exp(p["sigma"] ** 2 / 2)
        if self.kind == "normal":
            return p["mean"]
        if self.kind == "uniform":
            return (p["low"] + p["high"]) / 2
        return sum(p["samples"]) / len(p["samples"])

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        """A zero-argument function drawing from this distribution with ``rng``.

        Built once per site and simulation so the hot loop pays no dictionary look-ups.
        """
        p = dict(self.params)
        lo, hi = p.get("min", -math.inf), p.get("max", math.inf)

        def clip(draw: Callable[[], float]) -> Callable[[], float]:
            if lo == -math.inf and hi == math.inf:
                return draw
            return lambda: min(hi, max(lo, draw()))

        if self.kind == "fixed":
            value = p["value"]
            return lambda: value
        if self.kind == "exponential":
            rate = 1.0 / p["mean"] if p["mean"] > 0 else math.inf
            return clip((lambda: 0.0) if rate == math.inf else (lambda: rng.expovariate(rate)))
        if self.kind == "lognormal":
            mu, sigma = math.log(p["median"]) if p["median"] > 0 else -math.inf, p["sigma"]
            return clip((lambda: 0.0) if mu == -math.inf else (lambda: rng.lognormvariate(mu, sigma)))
        if self.kind == "normal":
            mean, std = p["mean"], p["std"]
            return clip(lambda: rng.gauss(mean, std))
        if self.kind == "uniform":
            low, high = p["low"], p["high"]
            return lambda: rng.uniform(low, high)
        samples = p["samples"]
        return lambda: rng.choice(samples)

    def describe(self) -> str:
        """Short human form, e.g. ``lognormal(median=600, sigma=1.2)``."""
        if self.kind == "empirical":
            return f"empirical({len(self.param('samples'))} samples)"
        inner = ", ".join(f"{k}={v:g}" for k, v in self.params)
        return f"{self.kind}({inner})"


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool); an int too large for a float is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
