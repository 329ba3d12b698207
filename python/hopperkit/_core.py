"""Loads the compiled core (hopperkit._C) and wraps its calls so that core errors surface typed."""
from __future__ import annotations

import functools

from .errors import from_core

try:
    from . import _C  # noqa: F401
except ImportError as e:  # pragma: no cover - only when the package was not built
    raise ImportError(
        "hopperkit's compiled core (hopperkit._C) is missing: install the package with `pip install .` "
        f"from the repository root ({e})"
    ) from e


def call(fn_name: str, *args, **kwargs):
    fn = getattr(_C, fn_name)
    try:
        return fn(*args, **kwargs)
    except _C.HopperkitError as e:
        raise from_core(e) from None


@functools.lru_cache(maxsize=None)
def build_info() -> dict:
    """Version, git hash, CUDA compiler and target architectures of this build."""
    return dict(_C.build_info())
