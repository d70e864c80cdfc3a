"""Checks of the arguments every layer passes to the native one: a value
the native layer cannot take is the library's exception naming the
argument, never a bare ``OverflowError`` or ``TypeError`` from PyO3."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._native import FusionError

__all__ = ["int64s"]


def int64s(what: str, values: Any, error: type[Exception] = FusionError) -> list[int]:
    """``values`` as Python ints in the native layer's int64 range; anything
    else is ``error`` naming ``what`` (never a bare ``OverflowError``)."""
    out = []
    for v in values:
        try:
            if isinstance(v, bool | np.bool_):
                raise TypeError  # a flag, not a count (numpy refuses it as an index)
            i = operator.index(v)
        except TypeError:
            raise error(f"{what}: expected integers, got {v!r}") from None
        if not -(2**63) <= i < 2**63:
            raise error(f"{what}: {i} is out of range")
        out.append(i)
    return out
