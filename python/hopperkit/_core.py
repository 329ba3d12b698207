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
    """Calls a core function; a core error comes back as (kind, arg, expected, actual, message) and is raised
    here as its typed subclass."""
    result, error = getattr(_C, fn_name)(*args, **kwargs)
    if error is not None:
        raise from_core(error)
    return result


@functools.lru_cache(maxsize=None)
def build_info() -> dict:
    """Version, git hash, CUDA compiler and target architectures of this build."""
    return dict(_C.build_info())
