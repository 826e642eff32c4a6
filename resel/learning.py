"""Rates learned during a run (issue 26 item 2): each site's T̂x updated from the tasks that
finished there, with the run's starting estimate (the stored fit, else LIM) as the prior.

**The model.** A task's run time on a site is the site's rate times a noise factor, so on the
log scale a task's y = ln(T_x / T̂x₀) — T̂x₀ the estimate the run started with — is the site's
offset μ plus noise of spread σ. The offsets of the sites whose prior is LIM share a part:

    μ_s = g + δ_s    (LIM sites),      g ~ N(0, τ_g²),  δ_s ~ N(0, τ_δ²)
    μ_s ~ N(0, τ_fit²)                 (sites with a stored fit)
    y_si ~ N(μ_s, σ_s²),               σ_s² ~ InvGamma(a₀, s₀² (a₀ − 1))

g is how far LIM is off for *this application* everywhere — LIM predicts from κ and a clock
with an IPC of 1, and the application's real IPC is much the same on every x86 site (docs/peers.md:
Seth runs 2.4× faster than LIM says, real GROMACS 3–4.5× on this host) — and δ_s what is wrong
about one site (its clock claim, its κ, its node type: LIM rates the pool 1.9× too fast
*against* Seth). A fit was made for the site and the application from measured runs: what is
left is how today's run differs (a node type, the load), τ_fit.

**The posterior**, exact for the Gaussian part given each site's σ_s (its inverse-gamma
posterior mean, b_n / (a_n − 1), from the spread of its own tasks): with n_s tasks of mean ȳ_s
a LIM site's ȳ_s ~ N(g, v_s), v_s = τ_δ² + σ_s²/n_s, so

    P_g = 1/τ_g² + Σ_s 1/v_s,   m_g = (Σ_s ȳ_s / v_s) / P_g
    k_s = τ_δ² / v_s  (0 for a site with no task),
    E[μ_s] = k_s ȳ_s + (1 − k_s) m_g,   Var[μ_s] = (1 − k_s) τ_δ² + (1 − k_s)² / P_g

(given g, δ_s is a normal update; the law of total variance over g's posterior gives the
rest). A fit site: k = τ_fit² / (τ_fit² + σ²/n), E[μ] = k ȳ, Var = (1 − k) τ_fit². The site's T̂x is
T̂x₀ · exp(E[μ_s]), its credible interval T̂x₀ · exp(E[μ_s] ± t · √Var), t Student's with the
site's 2a_n degrees of freedom (σ is estimated). One task on a LIM site moves its estimate
97 % of the way to what it measured and every other LIM site's 78 % of the way (before their
own tasks say otherwise); five tasks, 99 %. The interval narrows as tasks come.

**Why this choice.** Run times are multiplicative (a slower clock, a lower IPC, a loaded node
scale every task alike), so offsets on the log scale are what wrong inputs produce. Normal
updates are closed-form, so the engine stays pure, deterministic and O(sites) per finished
task. Sharing g is what makes a measurement on one site useful for deciding about another
before it has run anything: without it, a site that has not finished a task keeps LIM's
absolute figure, and a rule comparing it with a measured site compares a corrected number with
an uncorrected one (on HPC2N's queues, a site measured 2.3× faster than LIM then "sees" tasks
running on an unmeasured twin of it as far from done, and restarts them — measured, see
docs/peers.md). Constants, chosen from what was measured, not fitted to the goals: τ_g = 1
(LIM off by up to ×5 at 90 %), τ_δ = 0.5 (the sites' relative errors seen: 0.64 and 0.78 in
ln), τ_fit = 0.25, s₀ = 0.25 (a heterogeneous pool's slot spread; a cluster's is ~0.02).

**What is observed.** A task's execution time on the site: live, from the agent's own stamps
(:class:`~resel.events.TaskMeasured`, journaled, so a resumed engine learns alike); in the
simulator, from its attempt's start and end (the simulator starts a task at its dispatch),
less the data time the engine priced for its inputs. Only attempts that ended well count;
cancelled, lost and failed ones do not. A running task's elapsed time (a censored
observation: the task took at least that long) is not part of the closed form; where moving a
pool's running wave is weighed, :meth:`RateBeliefs.survivors` conditions one site's offset on
it numerically (:class:`Survivors`).

Standard library only: the engine imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

#: prior sd of g, LIM's common error for the application (ln scale)
TAU_COMMON = 1.0
#: prior sd of one LIM site's own error δ_s against the others
TAU_SITE = 0.5
#: prior sd of a fitted site's offset in this run
TAU_FIT = 0.25
#: the prior spread s₀ of one task's ln T_x around its site's rate, where nothing measured it
DEFAULT_SPREAD = 0.25
#: the inverse-gamma's shape a₀: 2 is the weakest prior whose variance has a mean
PRIOR_SHAPE = 2.0
#: smallest spread a prior may state (a fit of identical tasks on one quiet node says ~0)
MIN_SPREAD = 0.02
#: where a prior comes from: LIM (shares the common offset) or a stored fit
SOURCES = ("lim", "fit")
_PHI = NormalDist().cdf


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t with ``dof`` degrees of freedom (Abramowitz & Stegun 26.7.5:
    the normal quantile corrected in powers of 1/dof; within 0.1 % of the exact value for
    dof ≥ 4, which the prior's 2a₀ = 4 guarantees)."""
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + g1 / dof + g2 / dof ** 2 + g3 / dof ** 3 + g4 / dof ** 4


def _lognormal_left(m: float, s2: float, elapsed: float) -> float:
    """E[T − e | T > e] for ln T ~ N(m, s2), e = ``elapsed``: the log-normal's mean residual life
    (E[T] for e ≤ 0)."""
    s = math.sqrt(s2)
    mean = math.exp(m + s2 / 2)
    if elapsed <= 0:
        return mean
    le = math.log(elapsed)
    survive = _PHI((m - le) / s)
    if survive < 1e-12:       # far past every plausible end: the tail's asymptote
        return elapsed * s2 / max(1e-9, le - m)
    return max(0.0, mean * _PHI((m + s2 - le) / s) / survive - elapsed)


@dataclass(slots=True)
class SiteEvidence:
    """One site's prior and the tasks measured there: the sufficient statistics."""

    prior_tx: float                 # T̂x₀: the estimate the run started with (s)
    source: str = "lim"             # lim | fit
    spread: float = DEFAULT_SPREAD  # s₀: the prior's guess of one task's ln-spread
    n: int = 0
    mean: float = 0.0               # ȳ of ln(T_x / T̂x₀) over the n tasks
    m2: float = 0.0                 # Σ (y − ȳ)² (Welford)

    def add(self, y: float) -> None:
        self.n += 1
        delta = y - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (y - self.mean)

    @property
    def dof(self) -> float:
        """Degrees of freedom of the site's σ estimate: 2a_n."""
        return 2 * PRIOR_SHAPE + self.n

    @property
    def noise(self) -> float:
        """E[σ²] under the site's inverse-gamma posterior (its prior guess, then its tasks' spread)."""
        s0 = max(MIN_SPREAD, self.spread)
        an = PRIOR_SHAPE + self.n / 2
        return (s0 * s0 * (PRIOR_SHAPE - 1) + self.m2 / 2) / (an - 1)


@dataclass
class RateBeliefs:
    """What the run believes of every site's rate (module docstring): the evidence per site, and
    each site's posterior offset, recomputed when a task is counted."""

    sites: list[SiteEvidence]
    _mu: list[float] = field(default_factory=list)
    _var: list[float] = field(default_factory=list)
    _k: list[float] = field(default_factory=list)
    _var_g: float = 0.0

    def __post_init__(self) -> None:
        self._solve()

    @classmethod
    def of(cls, prior_tx: list[float], priors: list[tuple[str, float]]) -> "RateBeliefs":
        return cls([SiteEvidence(tx, src if src in SOURCES else "lim", spread)
                    for tx, (src, spread) in zip(prior_tx, priors)])

    def observe(self, x: int, seconds: float, predicted: float | None = None) -> bool:
        """Count one task that ran ``seconds`` on site x; False (nothing counted) for a time that
        is not a positive finite number. ``predicted``: that task's own T̂x₀ on x, where tasks
        differ (a bag of unequal tasks, issue 26 item 3) — the offset is a ratio to what was
        predicted for the task, so tasks of every size inform the site's one rate; by default
        the site's T̂x₀."""
        site = self.sites[x]
        base = site.prior_tx if predicted is None else predicted
        if not (seconds > 0 and math.isfinite(seconds)) or not base > 0:
            return False
        site.add(math.log(seconds / base))
        self._solve()
        return True

    def _solve(self) -> None:
        t2 = TAU_SITE * TAU_SITE
        precision, weighted = 1.0 / (TAU_COMMON * TAU_COMMON), 0.0
        for s in self.sites:
            if s.source == "lim" and s.n:
                v = t2 + s.noise / s.n
                precision += 1.0 / v
                weighted += s.mean / v
        m_g, var_g = weighted / precision, 1.0 / precision
        self._mu, self._var, self._k, self._var_g = [], [], [], var_g
        for s in self.sites:
            if s.source == "lim":
                k = t2 / (t2 + s.noise / s.n) if s.n else 0.0
                self._mu.append(k * s.mean + (1 - k) * m_g)
                self._var.append((1 - k) * t2 + (1 - k) ** 2 * var_g)
            else:
                f2 = TAU_FIT * TAU_FIT
                k = f2 / (f2 + s.noise / s.n) if s.n else 0.0
                self._mu.append(k * s.mean)
                self._var.append((1 - k) * f2)
            self._k.append(k)

    def tasks(self, x: int) -> int:
        """Tasks measured on site x."""
        return self.sites[x].n

    def factor(self, x: int) -> float:
        """T̂x / T̂x₀ of site x: how far the evidence moved its estimate."""
        return math.exp(self._mu[x])

    def tx(self, x: int) -> float:
        """Site x's T̂x now."""
        return self.sites[x].prior_tx * self.factor(x)

    def interval(self, x: int, level: float = 0.9) -> tuple[float, float]:
        """The central ``level`` credible interval of site x's T̂x (its typical task)."""
        half = t_quantile(0.5 + level / 2, self.sites[x].dof) * math.sqrt(self._var[x])
        base = self.sites[x].prior_tx
        return base * math.exp(self._mu[x] - half), base * math.exp(self._mu[x] + half)

    def var_diff(self, x: int, y: int) -> float:
        """Var[μ_x − μ_y]: how uncertain the ratio of two sites' rates is. Two LIM sites share
        the common offset g, which cancels from their ratio as far as neither measured itself
        (Cov[μ_x, μ_y] = (1 − k_x)(1 − k_y) Var[g])."""
        cov = 0.0
        sx, sy = self.sites[x], self.sites[y]
        if x != y and sx.source == "lim" and sy.source == "lim":
            cov = (1 - self._k[x]) * (1 - self._k[y]) * self._var_g
        return max(0.0, self._var[x] + self._var[y] - 2 * cov)

    def outlasts(self, x: int, elapsed: float, more: float) -> float:
        """P(T > e + ``more`` | T > e) for a task that has run e = ``elapsed`` seconds on site x:
        how likely it is still running ``more`` seconds from now (T log-normal with the site's
        predictive law, as :meth:`left`)."""
        site = self.sites[x]
        m = math.log(site.prior_tx) + self._mu[x]
        s = math.sqrt(self._var[x] + site.noise)
        alive = 1.0 - _PHI((math.log(elapsed) - m) / s) if elapsed > 0 else 1.0
        later = 1.0 - _PHI((math.log(elapsed + more) - m) / s) if elapsed + more > 0 else 1.0
        return 1.0 if alive <= 0 else later / alive

    def left(self, x: int, elapsed: float) -> float:
        """E[T − e | T > e] for a task that has run e = ``elapsed`` seconds on site x without
        ending: T log-normal with the site's predictive law (its rate's uncertainty and its
        tasks' spread). A task that has run long on a site whose rate is in doubt is likely on a
        slow slot, or the site is slower than believed: the longer it runs past the estimate,
        the more is left (the log-normal's mean residual life grows in its tail)."""
        site = self.sites[x]
        return _lognormal_left(math.log(site.prior_tx) + self._mu[x], self._var[x] + site.noise, elapsed)

    def survivors(self, x: int, elapsed: list[float]) -> "Survivors":
        """What site x's running tasks say by not having ended: its offset μ_x's posterior given
        also that each of them has run ``elapsed``[j] seconds (in the site's typical task's
        units) without ending — censored observations, which the closed form above leaves out.
        A wave of tasks all still running past what the site was believed to take says it is
        slower than believed before any of them ends (:class:`Survivors`)."""
        return Survivors.of(self, x, elapsed)

    def as_dict(self, x: int, level: float = 0.9) -> dict:
        s = self.sites[x]
        lo, hi = self.interval(x, level)
        return {"prior_tx": s.prior_tx, "prior": s.source, "tasks": s.n, "tx": self.tx(x),
                "factor": self.factor(x), "interval": [lo, hi], "level": level}


#: points of the grid on which :class:`Survivors` integrates over a site's offset
_GRID = 241
#: ln-width of the bins running tasks' elapsed times are grouped in (0.5 %: a pool's wave
#: starts within a minute or two, so a thousand tasks make a handful of bins)
_BIN = 0.005


def _log_sf(z: float) -> float:
    """ln(1 − Φ(z)), finite far into the upper tail (Mills' ratio where erfc underflows)."""
    if z < 30.0:
        return math.log(0.5 * math.erfc(z / math.sqrt(2.0)))
    return -0.5 * z * z - math.log(z * math.sqrt(2.0 * math.pi))


@dataclass(frozen=True)
class Survivors:
    """A site's offset μ given its finished tasks (the beliefs' normal posterior, the prior
    here) and given that its running tasks have each outlasted their elapsed time: on a grid of
    μ, prior × Π_j P(T_j > e_j | μ), normalized in logs (a long outlasting moves the mass far
    into the prior's tail). Given μ, a task's ln T is normal with the site's noise σ, and tasks
    are independent (each its own slot on a pool).

    Why a grid: the censored likelihood is not conjugate; one dimension integrates exactly
    enough at a few hundred points, deterministic and in the standard library, and it is
    computed only where a move of running work is weighed (resel.engine_learning)."""

    mu: tuple[float, ...]        # grid of ln T (the site's typical task), offset included
    weight: tuple[float, ...]    # posterior mass at each point
    sigma: float                 # one task's ln-spread about the site's rate
    bins: tuple[tuple[float, int], ...]   # (ln e, count) of the running tasks (ln e = -inf: not started)

    @classmethod
    def of(cls, beliefs: RateBeliefs, x: int, elapsed: list[float]) -> "Survivors":
        site = beliefs.sites[x]
        m = math.log(site.prior_tx) + beliefs._mu[x]
        sd = math.sqrt(max(0.0, beliefs._var[x]))
        sigma = math.sqrt(site.noise)
        counts: dict[float, int] = {}
        for e in elapsed:
            key = round(math.log(e) / _BIN) * _BIN if e > 0 else -math.inf
            counts[key] = counts.get(key, 0) + 1
        bins = tuple(sorted(counts.items()))
        if sd == 0.0:
            return cls((m,), (1.0,), sigma, bins)
        top = max([m + 6 * sd] + [c + 6 * sigma for c, _ in bins if c > -math.inf])
        lo = m - 6 * sd
        step = (top - lo) / (_GRID - 1)
        grid = [lo + i * step for i in range(_GRID)]
        logs = []
        for mu in grid:
            lp = -0.5 * ((mu - m) / sd) ** 2
            for c, k in bins:
                if c > -math.inf:
                    lp += k * _log_sf((c - mu) / sigma)
            logs.append(lp)
        peak = max(logs)
        w = [math.exp(v - peak) for v in logs]
        total = sum(w)
        return cls(tuple(grid), tuple(v / total for v in w), sigma, bins)

    def mean_rate(self) -> float:
        """E[exp μ]: the site's typical task's T_x, given what ran and what still runs."""
        return sum(w * math.exp(mu) for mu, w in zip(self.mu, self.weight))

    def any_outlasts(self, more: float) -> float:
        """P(at least one of the running tasks still runs ``more`` seconds from now)."""
        if not self.bins:
            return 0.0
        if not more > 0:
            return 1.0
        p = 0.0
        for mu, w in zip(self.mu, self.weight):
            none = 0.0     # ln P(every one of them has ended by then | μ)
            for c, k in self.bins:
                now = 0.0 if c == -math.inf else _log_sf((c - mu) / self.sigma)
                later = _log_sf((math.log(math.exp(c) + more) - mu) / self.sigma)
                q = math.exp(min(0.0, later - now))   # P(T > e + more | T > e, μ)
                if q >= 1.0:
                    none = -math.inf
                    break
                none += k * math.log1p(-q)
            p += w * (1.0 - math.exp(none))
        return min(1.0, max(0.0, p))

    def left(self, elapsed: float) -> float:
        """E[T − e | T > e] of one running task that has run e = ``elapsed`` seconds, μ integrated
        over its posterior (the log-normal's mean residual life given μ)."""
        s2 = self.sigma * self.sigma
        return sum(w * _lognormal_left(mu, s2, elapsed) for mu, w in zip(self.mu, self.weight))
