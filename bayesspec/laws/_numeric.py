"""Array helpers the law modules share: float arrays for the public numpy functions, the
backend's special functions, and an axis's length known before any value (numpy arrays
and PyTensor graphs alike).
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
