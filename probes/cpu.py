"""Discover the host CPU's model and clocks, each figure with the source it came from.

LIM divides instructions by a site's clock; the thesis's first LIM used the *base* clock and
over-predicted by 157–171 %, so resel records base, max and sampled clocks separately and says
where each came from (sysfs cpufreq, ``lscpu -J``, ``/proc/cpuinfo``, the model name's
"@ 2.40GHz"). A missing source (VMs often have no cpufreq; containers may hide /proc) yields
``None``, never an exception: discovery runs on unknown sites.
"""

from __future__ import annotations

import math

import json
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuInfo:
    """Host CPU: model, clocks in GHz (None if unknown) and the method of each."""

    model: str | None
    base_ghz: float | None
    max_ghz: float | None
    cur_ghz: float | None
    methods: dict[str, str] = field(default_factory=dict)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _field_key(name: str) -> str:
    """An lscpu field name without the colons and blanks that trail it ("Model name:  " -> "Model name").

    Every trailing colon goes, not just the last: a field that is itself ": " must not read back as
    ":" — the key is the name, never part of lscpu's separator.
    """
    return re.sub(r"[\s:]+\Z", "", name).strip()


def parse_lscpu_json(text: str) -> dict[str, str]:
    """``lscpu -J`` -> ``{field without colon: data}``.

    util-linux < 2.38 prints a flat list of ``{"field", "data"}``; newer versions nest entries
    under ``"children"`` (e.g. "Model name" under "Vendor ID"). Both are flattened here. Bad JSON
    gives ``{}`` — lscpu is one source among several.
    """
    try:
        doc = json.loads(text)
    except (ValueError, TypeError, RecursionError):   # RecursionError: nesting too deep to decode
        return {}
    out: dict[str, str] = {}

    def walk(entries: object) -> None:
        if not isinstance(entries, list):
            return
        for e in entries:
            if not isinstance(e, dict):
                continue
            name, data = e.get("field"), e.get("data")
            if isinstance(name, str) and data is not None:
                out.setdefault(_field_key(name), str(data).strip())
            walk(e.get("children"))

    walk(doc.get("lscpu") if isinstance(doc, dict) else None)
    return out


def parse_cpuinfo(text: str) -> tuple[str | None, list[float]]:
    """``/proc/cpuinfo`` -> (first "model name", every "cpu MHz" value)."""
    model = None
    mhz: list[float] = []
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name, value = name.strip(), value.strip()
        if name == "model name" and model is None and value:
            model = value
        elif name == "cpu MHz":
            try:
                value_mhz = float(value)
            except ValueError:
                continue
            if math.isfinite(value_mhz):   # "nan" or "inf" would poison the mean clock
                mhz.append(value_mhz)
    return model, mhz


def ghz_in_model_name(model: str | None) -> float | None:
    """Intel names carry the base clock ("... CPU @ 2.40GHz"); AMD names usually do not."""
    if not model:
        return None
    m = re.search(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", model, re.IGNORECASE)
    return float(m.group(1)) if m else None


def read_cpufreq(base: Path = CPUFREQ) -> dict[str, float]:
    """sysfs cpufreq files (kHz) -> GHz, only those present and numeric."""
    out: dict[str, float] = {}
    for name in ("base_frequency", "cpuinfo_max_freq", "scaling_cur_freq"):
        text = _read(base / name)
        try:
            khz = float(text.strip()) if text else None
        except ValueError:
            khz = None
        if khz:
            out[name] = khz / 1e6
    return out


def run_lscpu() -> dict[str, str]:
    try:
        proc = subprocess.run(["lscpu", "-J"], capture_output=True, text=True, timeout=10,
                              env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_lscpu_json(proc.stdout) if proc.returncode == 0 else {}


def _mhz(value: str | None) -> float | None:
    try:
        return float(value.replace(",", ".")) / 1000 if value else None
    except ValueError:
        return None


def discover(*, lscpu: dict[str, str] | None = None, cpuinfo_text: str | None = None,
             cpufreq: dict[str, float] | None = None) -> CpuInfo:
    """Combine all sources, best first; arguments override the live sources (for tests)."""
    ls = run_lscpu() if lscpu is None else lscpu
    text = _read(CPUINFO) if cpuinfo_text is None else cpuinfo_text
    freq = read_cpufreq() if cpufreq is None else cpufreq
    ci_model, ci_mhz = parse_cpuinfo(text or "")
    methods: dict[str, str] = {}

    model = None
    if ci_model:
        model, methods["model"] = ci_model, "cpuinfo:model name"
    elif ls.get("Model name"):
        model, methods["model"] = ls["Model name"], "lscpu:Model name"

    base = None
    if freq.get("base_frequency"):
        base, methods["base_ghz"] = freq["base_frequency"], "cpufreq:base_frequency"
    elif ghz_in_model_name(model):
        base, methods["base_ghz"] = ghz_in_model_name(model), "model-name:@GHz"
    elif _mhz(ls.get("CPU MHz")):
        base, methods["base_ghz"] = _mhz(ls.get("CPU MHz")), "lscpu:CPU MHz"
    elif ci_mhz:
        # A VM's "cpu MHz" is the host's nominal (TSC) clock: the best base figure it offers.
        base, methods["base_ghz"] = sum(ci_mhz) / len(ci_mhz) / 1000, "cpuinfo:cpu MHz"

    mx = None
    if freq.get("cpuinfo_max_freq"):
        mx, methods["max_ghz"] = freq["cpuinfo_max_freq"], "cpufreq:cpuinfo_max_freq"
    elif _mhz(ls.get("CPU max MHz")):
        mx, methods["max_ghz"] = _mhz(ls.get("CPU max MHz")), "lscpu:CPU max MHz"

    cur = None
    if freq.get("scaling_cur_freq"):
        cur, methods["cur_ghz"] = freq["scaling_cur_freq"], "cpufreq:scaling_cur_freq"
    elif ci_mhz:
        cur, methods["cur_ghz"] = sum(ci_mhz) / len(ci_mhz) / 1000, "cpuinfo:cpu MHz"
    return CpuInfo(model, base, mx, cur, methods)


class MhzSampler:
    """Sample the clock every ``interval`` s while a command runs (fallback when cycles are not counted).

    Reads sysfs ``scaling_cur_freq`` when present (exact per core), else the mean "cpu MHz" of
    /proc/cpuinfo. One sample is taken at start so even a run shorter than ``interval`` has one.
    Use as a context manager; :attr:`mean_ghz` and :attr:`method` afterwards.
    """

    def __init__(self, interval: float = 0.2, cpufreq: Path = CPUFREQ, cpuinfo: Path = CPUINFO):
        self.interval = interval
        self.cpufreq = cpufreq
        self.cpuinfo = cpuinfo
        self.samples: list[float] = []
        self.method: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="resel-mhz-sampler")

    def sample(self) -> None:
        text = _read(self.cpufreq / "scaling_cur_freq")
        if text:
            try:
                self.samples.append(float(text.strip()) / 1e6)
                self.method = "cpufreq:sampled"
                return
            except ValueError:
                pass
        _, mhz = parse_cpuinfo(_read(self.cpuinfo) or "")
        if mhz:
            self.samples.append(sum(mhz) / len(mhz) / 1000)
            self.method = "cpuinfo:sampled"

    def _loop(self) -> None:
        self.sample()
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "MhzSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean_ghz(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def sample_during(fn, interval: float = 0.2):
    """Call ``fn()`` while sampling the clock; returns ``(result, mean GHz or None, method)``."""
    with MhzSampler(interval) as s:
        result = fn()
    return result, s.mean_ghz, s.method


__all__ = ["CpuInfo", "MhzSampler", "discover", "parse_cpuinfo", "parse_lscpu_json", "read_cpufreq",
           "ghz_in_model_name", "sample_during"]
