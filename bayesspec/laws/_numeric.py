"""Array helpers the law modules share: float arrays for the public numpy functions, the
backend's special functions, an axis's length known before any value (numpy arrays
and PyTensor graphs alike), a broadcast array's values at some points, and the version
of a numba kernel's source.
"""

from __future__ import annotations

import numpy as np


def _as_float(*values):
    """Each value as a float array (the public numpy functions' inputs)."""
    return [np.asarray(v, dtype=float) for v in values]


def _special(xp):
    """(betainc, gammaln) of the backend: scipy's for numpy, PyTensor's for its tensors."""
    if xp is np:
        from scipy.special import betainc, gammaln

        return betainc, gammaln
    return xp.betainc, xp.gammaln


def _static_size(array, axis: int = -1) -> int:
    """The length of ``axis``, known before any value (a pytensor graph's static shape)."""
    kind = getattr(array, "type", None)
    size = kind.shape[axis] if kind is not None and hasattr(kind, "shape") else None
    return int(size if size is not None else np.shape(array)[axis])


def _gathered(values: np.ndarray, at: tuple) -> np.ndarray:
    """``np.broadcast_to(values, shape)[at]`` for the indices ``at`` of np.nonzero over
    that shape, read from ``values`` itself (a draw's cost, not a copy per rate); ``at``
    a 0-d mask: ``values`` (0-d) masked."""
    if not isinstance(at, tuple):
        return values[at]
    shape = (1,) * (len(at) - values.ndim) + values.shape
    if all(n == 1 for n in shape):
        return np.full(at[0].shape, values.reshape(-1)[0])
    return values.reshape(shape)[tuple(i if n > 1 else 0 for i, n in zip(at, shape))]


def kernel_version(*functions, constants: dict | None = None) -> int:
    """A number that changes with the source of ``functions`` and the ``constants`` baked
    into them: the salt of a numba kernel's cache key. PyTensor caches compiled Ops on
    disk by their class and props alone, so without it an edited kernel keeps running its
    old compiled code."""
    import hashlib
    import inspect

    source = "".join(inspect.getsource(f) for f in functions)
    source += repr(sorted((constants or {}).items()))
    return int(hashlib.sha256(source.encode()).hexdigest()[:15], 16)
