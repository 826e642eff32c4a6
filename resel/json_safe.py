"""Values made JSON-safe: what every ``--json`` document and every JSON column goes through.

A module of its own, on the standard library only, so that a command printing JSON need not
import the run store (and with it sqlite_utils and numpy) to clean its document.
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, dataclasses become dicts, enum members their values
    (sqlite_utils cannot type a column from an enum; a string enum's value is what it stores),
    bytes (a blob in a damaged store) their UTF-8 text, undecodable bytes replaced."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (bytes, bytearray, memoryview)):   # a blob where a damaged store has text
        return bytes(value).decode("utf-8", "replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: clean(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value
