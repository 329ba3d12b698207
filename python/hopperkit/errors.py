"""Typed errors raised by hopperkit.

Every error names the argument, the expected and the actual value. They come from one place: the C++ core's
checks (re-raised here as the matching subclass) or the thin Python layer's own device/dtype checks, which
use the same message format.
"""
from __future__ import annotations


class HopperkitError(RuntimeError):
    """Base class. Attributes: kind, arg, expected, actual."""

    kind = "error"

    def __init__(self, arg: str, expected: str, actual: str, message: str | None = None):
        self.arg, self.expected, self.actual = arg, expected, actual
        super().__init__(message or f"hopperkit {self.kind} error: '{arg}': expected {expected}, got {actual}")


class ShapeError(HopperkitError, ValueError):
    kind = "shape"


class DtypeError(HopperkitError, TypeError):
    kind = "dtype"


class DeviceError(HopperkitError, ValueError):
    kind = "device"


class StrideError(HopperkitError, ValueError):
    kind = "stride"


class AlignmentError(HopperkitError, ValueError):
    kind = "alignment"


class InvalidValueError(HopperkitError, ValueError):
    kind = "value"


class UnsupportedError(HopperkitError, NotImplementedError):
    kind = "unsupported"


class CudaError(HopperkitError):
    kind = "cuda"


class PlanError(HopperkitError):
    """A decode plan was used against its reuse contract (see DecodePlan.check)."""

    kind = "plan"


_BY_KIND = {c.kind: c for c in (ShapeError, DtypeError, DeviceError, StrideError, AlignmentError,
                                 InvalidValueError, UnsupportedError, CudaError)}


def from_core(error: tuple) -> HopperkitError:
    """Turns the core's (kind, arg, expected, actual, message) into the typed exception."""
    kind, arg, expected, actual, message = error
    return _BY_KIND.get(kind, HopperkitError)(arg, expected, actual, message)
