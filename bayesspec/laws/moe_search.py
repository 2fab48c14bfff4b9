"""Eq. (4)'s least root inside a graph (docs/laws.md, eq. (4)): :func:`moe_latency_expr`, of
fixed cost and with the implicit gradient, and the bracketing search it runs as one
PyTensor Op (numpy ``perform``, numba element by element). PyTensor and numba are
imported only when a graph asks for the Op.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = ["MOE_BISECTION_STEPS", "MOE_NEWTON_STEPS", "moe_latency_expr"]


#: Steps of the in-graph solve of eq. (4) (:func:`moe_latency_expr`): bisections for the
#: minimum of F on its convex part and for the least root, then Newton steps inside the
#: final bracket. 2^-20 of the bracket's log-width, then four Newton steps: the least root
#: to 1e-12 on 400k random inputs over decades of costs, also where coverage rises steeply
#: within a sweep (tests/bayes/test_moe.py); 12 bisections still did, 8 missed one input by a
#: factor 55. Each step costs one evaluation per row in every gradient of a fit.
MOE_BISECTION_STEPS = 20
MOE_NEWTON_STEPS = 4


def moe_latency_expr(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=1.0, *,
                     token_offset=0.0, xp: ModuleType = np,
                     bisection_steps: int = MOE_BISECTION_STEPS,
                     newton_steps: int = MOE_NEWTON_STEPS, final_step: bool = True,
                     start=None):
    """Eq. (4) solved inside a graph: the least fixed point, as
    :func:`~bayesspec.laws.moe_latency`.

    Of fixed cost and differentiable, for the PyMC models. The roots of
    F(L) = C1u + phi(L)*(C1s + rps*C2s*L) - L*(1 - rps*C2u) are the fixed points; F is
    convex below its inflection and concave above (see
    :func:`~bayesspec.laws.moe_latency`), so the least root is found by bracketing alone:
    a bisection on the sign of F' for F's minimum over the convex part, then one on the
    sign of F for the root left of it (when F dips to 0 there) or right of it, then
    safeguarded Newton steps inside the bracket.

    The search runs without gradients (with ``xp=pt``, in numpy inside one Op); the result
    is one Newton step from the found root L0 with L0 held fixed, L0 - F(L0)/F'(L0), whose
    gradient is the implicit one, dL/dtheta = -F_theta/F_L (``final_step``: whether to
    take it). ``start``: a root already found (L0): only the final step is taken.
    Fixed-point steps from the phi = 0 latency, then Newton, stall where coverage rises
    steeply within a sweep: on such a design they returned latencies up to 61% off the
    least root at half the draws of one group, and the chains settled in the modes those
    wrong latencies made.
    T = token_offset + rps*L*tokens_per_request. The caller keeps rps*(c2u + c2s) < 1.
    """
    tiny = 1e-300
    if xp is not np and start is None:
        inputs = (rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request)
        found = _LeastRootSearch.apply(inputs, token_offset=token_offset,
                                       bisection_steps=bisection_steps,
                                       newton_steps=newton_steps)
        # the implicit-gradient step, in the graph
        return moe_latency_expr(*inputs, token_offset=token_offset, xp=xp, start=found)
    per_latency = -rps * tokens_per_request * xp.log1p(-m / M)     # beta: T's slope in L
    at_zero = -token_offset * xp.log1p(-m / M)                       # beta0: T at L = 0
    kappa = rps * c2s
    free = 1.0 - rps * c2u

    def coverage(latency):
        return -xp.expm1(-(at_zero + per_latency * latency))

    def residual(latency):                                           # F
        return c1u + coverage(latency) * (c1s + kappa * latency) - latency * free

    def slope(latency):                                              # F'
        phi = coverage(latency)
        return per_latency * (1.0 - phi) * (c1s + kappa * latency) + phi * kappa - free

    if start is not None:
        return start - residual(start) / xp.minimum(slope(start), -tiny)

    def bisect(lo, hi, go_up, steps):
        for _ in range(steps):
            mid = xp.sqrt(lo * hi)          # geometric: brackets span decades near the pole
            up = go_up(mid)
            lo, hi = xp.where(up, mid, lo), xp.where(up, hi, mid)
        return lo, hi

    phi0 = coverage(0.0 * per_latency)
    low = (c1u + phi0 * c1s) / (1.0 - rps * (c2u + phi0 * c2s))
    full_free = xp.maximum(1.0 - rps * (c2u + c2s), tiny)
    high = xp.maximum((c1u + c1s) / full_free, low)
    convex = (per_latency > 0) & (kappa > 0)
    inflection = xp.where(convex, 2.0 / xp.where(convex, per_latency, 1.0)
                          - c1s / xp.where(convex, kappa, 1.0), 0.0)
    convex_end = xp.minimum(xp.maximum(inflection, low), high)
    # F's minimum over the convex part [low, convex_end]: F' increases there
    lo, hi = bisect(low, convex_end, lambda x: slope(x) < 0.0, bisection_steps)
    minimum = xp.where(slope(convex_end) < 0.0, convex_end,
                       xp.where(slope(low) >= 0.0, low, xp.sqrt(lo * hi)))
    # F >= 0 at low and <= 0 at high; where F dips to zero on the convex part, the least
    # root is the one left of the minimum, else the only one right of it.
    dips = residual(minimum) <= 0.0
    lo, hi = bisect(xp.where(dips, low, minimum), xp.where(dips, minimum, high),
                    lambda x: residual(x) > 0.0, bisection_steps)
    latency = xp.sqrt(lo * hi)
    for _ in range(newton_steps):
        step = residual(latency) / xp.minimum(slope(latency), -tiny)
        latency = xp.minimum(xp.maximum(latency - step, lo), hi)
    if final_step:
        # one Newton step with the root held fixed: its gradient is the implicit one
        latency = latency - residual(latency) / xp.minimum(slope(latency), -tiny)
    return latency


class _LeastRootSearch:
    """The bracketing search of :func:`moe_latency_expr` as one PyTensor Op that runs it
    in numpy, its gradient disconnected (the implicit step after it carries the
    gradient). Unrolled in the graph, the search's ~50 elementwise steps took the graph
    rewriter and numba 430 s to compile per model (measured, 2026-12-04); as an Op the
    model compiled in 30-64 s under the same load, and with the numba version of the search
    (:func:`_register_numba_search`) a gradient costs what the unrolled graph's did."""

    _op_class = None

    @classmethod
    def apply(cls, inputs, **options):
        import pytensor.tensor as pt

        if cls._op_class is None:
            cls._op_class = cls._make_op_class()
        inputs = pt.broadcast_arrays(*(pt.as_tensor_variable(x).astype("float64")
                                       for x in inputs))
        return cls._op_class(**options)(*inputs)

    @staticmethod
    def _make_op_class():
        from pytensor.gradient import disconnected_type
        from pytensor.graph.basic import Apply
        from pytensor.graph.op import Op

        class LeastRootSearch(Op):
            __props__ = ("token_offset", "bisection_steps", "newton_steps")

            def __init__(self, token_offset, bisection_steps, newton_steps):
                self.token_offset = float(token_offset)
                self.bisection_steps = int(bisection_steps)
                self.newton_steps = int(newton_steps)

            def make_node(self, *inputs):
                return Apply(self, list(inputs), [inputs[0].type()])

            def perform(self, node, inputs, outputs):
                with np.errstate(all="ignore"):
                    outputs[0][0] = np.asarray(moe_latency_expr(
                        *inputs, token_offset=self.token_offset, xp=np,
                        bisection_steps=self.bisection_steps,
                        newton_steps=self.newton_steps, final_step=False), dtype="float64")

            def connection_pattern(self, node):
                return [[False] for _ in node.inputs]

            def grad(self, inputs, output_gradients):
                return [disconnected_type() for _ in inputs]

            def infer_shape(self, fgraph, node, shapes):
                return [shapes[0]]

        _register_numba_search(LeastRootSearch)
        return LeastRootSearch


def _register_numba_search(op_class) -> None:
    """The search of :func:`moe_latency_expr` element by element in numba, for the
    models nutpie compiles (the same steps as the vectorised numpy search; without this,
    numba runs the Op's numpy ``perform`` in object mode at ~2 ms per gradient)."""
    try:
        from pytensor.link.numba.dispatch import basic as numba_basic
    except ImportError:   # no numba: the numpy perform serves
        return
    import math

    from bayesspec.laws._numeric import kernel_version

    @numba_basic.register_funcify_default_op_cache_key(op_class)
    def funcify(op, node=None, **kwargs):
        offset = op.token_offset
        bisections, newtons = op.bisection_steps, op.newton_steps
        tiny = 1e-300

        @numba_basic.numba_njit
        def one(rps, c1u, c1s, c2u, c2s, m, M, tokens):
            keep = math.log1p(-m / M)
            per_latency, at_zero = -rps * tokens * keep, -offset * keep
            kappa, free = rps * c2s, 1.0 - rps * c2u

            def coverage(x):
                return -math.expm1(-(at_zero + per_latency * x))

            def residual(x):
                return c1u + coverage(x) * (c1s + kappa * x) - x * free

            def slope(x):
                phi = coverage(x)
                return per_latency * (1.0 - phi) * (c1s + kappa * x) + phi * kappa - free

            phi0 = coverage(0.0 * per_latency)
            low = (c1u + phi0 * c1s) / (1.0 - rps * (c2u + phi0 * c2s))
            high = max((c1u + c1s) / max(1.0 - rps * (c2u + c2s), tiny), low)
            if per_latency > 0 and kappa > 0:
                inflection = 2.0 / per_latency - c1s / kappa
            else:
                inflection = 0.0
            convex_end = min(max(inflection, low), high)
            lo, hi = low, convex_end
            for _ in range(bisections):
                mid = math.sqrt(lo * hi)
                if slope(mid) < 0.0:
                    lo = mid
                else:
                    hi = mid
            if slope(convex_end) < 0.0:
                minimum = convex_end
            elif slope(low) >= 0.0:
                minimum = low
            else:
                minimum = math.sqrt(lo * hi)
            if residual(minimum) <= 0.0:
                lo, hi = low, minimum
            else:
                lo, hi = minimum, high
            for _ in range(bisections):
                mid = math.sqrt(lo * hi)
                if residual(mid) > 0.0:
                    lo = mid
                else:
                    hi = mid
            x = math.sqrt(lo * hi)
            for _ in range(newtons):
                x = min(max(x - residual(x) / min(slope(x), -tiny), lo), hi)
            return x

        @numba_basic.numba_njit
        def search(rps, c1u, c1s, c2u, c2s, m, M, tokens):
            out = np.empty(rps.shape, dtype=np.float64)
            flat = out.reshape(-1)
            a, b, c, d = rps.ravel(), c1u.ravel(), c1s.ravel(), c2u.ravel()
            e, f, g, h = c2s.ravel(), m.ravel(), M.ravel(), tokens.ravel()
            for i in range(flat.size):
                flat[i] = one(a[i], b[i], c[i], d[i], e[i], f[i], g[i], h[i])
            return out

        return search, kernel_version(_register_numba_search)
