"""The compute roof's searches as PyTensor Ops (:mod:`bayesspec.laws.roofline` defines
them): an Op over broadcast float inputs whose gradient an implicit Newton step after it
carries, run by the numpy search it is given, or under nutpie by the numba kernels here,
element by element (the same steps as the numpy searches on scalars).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SearchOp", "numba_kernels"]


class SearchOp:
    """A search as one PyTensor Op over broadcast float inputs, its gradient disconnected
    (an implicit Newton step after it carries the gradient); numba element by element
    where the models compile under nutpie, the numpy ``perform`` otherwise."""

    outputs = 1
    numpy_search = None
    numba_kernel = None   # name of the kernel in :func:`numba_kernels`
    constants: dict = {}
    _op_class = None

    @classmethod
    def apply(cls, inputs):
        import pytensor.tensor as pt

        if cls._op_class is None:
            cls._op_class = _make_search_op(cls.__name__, cls.outputs, cls.numpy_search,
                                            cls.numba_kernel, cls.constants)
        inputs = pt.broadcast_arrays(*(pt.as_tensor_variable(x).astype("float64")
                                       for x in inputs))
        return cls._op_class()(*inputs)


def _make_search_op(name, outputs, numpy_search, kernel, constants):
    from pytensor.gradient import disconnected_type
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class SearchOp(Op):
        __props__ = ()

        def make_node(self, *inputs):
            return Apply(self, list(inputs), [inputs[0].type() for _ in range(outputs)])

        def perform(self, node, inputs, output_storage):
            results = numpy_search(*inputs)
            for storage, value in zip(output_storage, results):
                storage[0] = np.asarray(value, dtype="float64")

        def connection_pattern(self, node):
            return [[False] * outputs for _ in node.inputs]

        def grad(self, inputs, output_gradients):
            return [disconnected_type() for _ in inputs]

        def infer_shape(self, fgraph, node, shapes):
            return [shapes[0]] * outputs

    SearchOp.__name__ = SearchOp.__qualname__ = name.lstrip("_")
    _register_numba_search(SearchOp, outputs, kernel, constants)
    return SearchOp


def _register_numba_search(op_class, outputs, kernel, constants) -> None:
    """The search element by element in numba, for the models nutpie compiles (the same
    steps as the numpy search; without it numba runs the numpy ``perform`` in object
    mode)."""
    try:
        from pytensor.link.numba.dispatch import basic as numba_basic
    except ImportError:   # no numba: the numpy perform serves
        return
    from bayesspec.laws._numeric import kernel_version

    kernels = numba_kernels(numba_basic.numba_njit, constants)
    one = kernels[kernel]

    @numba_basic.register_funcify_default_op_cache_key(op_class)
    def funcify(op, node=None, **kwargs):
        if outputs == 2:
            @numba_basic.numba_njit
            def search(a, b, c, d, e, f, g, h, i, j, l, kk, cy, be):
                first = np.empty(a.shape, dtype=np.float64)
                second = np.empty(a.shape, dtype=np.float64)
                x, y = first.reshape(-1), second.reshape(-1)
                args = (a.ravel(), b.ravel(), c.ravel(), d.ravel(), e.ravel(), f.ravel(),
                        g.ravel(), h.ravel(), i.ravel(), j.ravel(), l.ravel(), kk.ravel(),
                        cy.ravel(), be.ravel())
                for m in range(x.size):
                    x[m], y[m] = one(args[0][m], args[1][m], args[2][m], args[3][m],
                                     args[4][m], args[5][m], args[6][m], args[7][m],
                                     args[8][m], args[9][m], args[10][m], args[11][m],
                                     args[12][m], args[13][m])
                return first, second
        else:
            @numba_basic.numba_njit
            def search(a, b, c, d, e, f, g, h, i, j, l, kk, cy, be):
                first = np.empty(a.shape, dtype=np.float64)
                x = first.reshape(-1)
                args = (a.ravel(), b.ravel(), c.ravel(), d.ravel(), e.ravel(), f.ravel(),
                        g.ravel(), h.ravel(), i.ravel(), j.ravel(), l.ravel(), kk.ravel(),
                        cy.ravel(), be.ravel())
                for m in range(x.size):
                    x[m] = one(args[0][m], args[1][m], args[2][m], args[3][m], args[4][m],
                               args[5][m], args[6][m], args[7][m], args[8][m], args[9][m],
                               args[10][m], args[11][m], args[12][m], args[13][m])
                return first
        return search, kernel_version(numba_kernels, _register_numba_search,
                                      constants=constants)


_NUMBA_KERNELS = None


def numba_kernels(njit, constants: dict):
    """The roof's searches on scalars in numba: the same steps as the numpy functions of
    :mod:`bayesspec.laws.roofline` (``_pass_parts``, ``_prompt_pass``, ``_excess_at``,
    ``roof_prompt_count``, ``roof_concurrency_expr``), compiled once; ``constants``: their
    join power, the bend's reach, Newton steps and far bounds."""
    global _NUMBA_KERNELS
    if _NUMBA_KERNELS is not None:
        return _NUMBA_KERNELS
    import math

    power, reach = constants["power"], constants["reach"]
    steps, far = constants["steps"], constants["far"]
    count_steps, far_prompts = constants["count_steps"], constants["far_prompts"]

    @njit
    def pass_parts(batch, floor, kv, token, per_request_tokens, bend):
        per_request = per_request_tokens * token
        memory = floor + batch * kv
        work = batch * per_request
        ratio = work / floor
        held = 1.0 / (1.0 + ratio / reach)
        compute = work * (1.0 + bend * ratio * held)
        compute_slope = per_request * (1.0 + bend * ratio * held * (1.0 + held))
        top = max(memory, compute)
        joined = top * ((memory / top) ** power + (compute / top) ** power) ** (1.0 / power)
        slope = ((memory / joined) ** (power - 1.0) * kv
                 + (compute / joined) ** (power - 1.0) * compute_slope)
        return joined, slope, compute, compute_slope

    @njit
    def poisson_at(count, mean):
        if mean <= 0.0:
            return (1.0 if count == 0.0 else 0.0), 0.0
        pmf = math.exp(count * math.log(mean) - mean - math.lgamma(count + 1.0))
        if count > mean + 12.0 * math.sqrt(mean) + 40.0:
            return pmf, 0.0
        if mean > 600.0:   # far iterates only: the normal's tail
            return pmf, 0.5 * math.erfc((count + 0.5 - mean) / math.sqrt(2.0 * mean))
        p = math.exp(-mean)
        total = p
        for j in range(1, int(count) + 1):
            p *= mean / j
            total += p
        return pmf, max(1.0 - total, 0.0)

    @njit
    def prompt_pass(batch, floor, kv, token, per_request_tokens, bend, prompt, mean):
        joined, slope, compute, compute_slope = pass_parts(batch, floor, kv, token,
                                                           per_request_tokens, bend)
        if prompt <= 0.0:
            return joined, slope, 0.0
        room = min(max((joined - compute) / prompt, 0.0), far_prompts)
        count = math.floor(room)
        pmf, above = poisson_at(count, mean)
        return (joined + prompt * (mean * (above + pmf) - room * above),
                slope - above * (slope - compute_slope),
                prompt * (above + pmf * (1.0 - room + count)))

    @njit
    def step(batch, vf, vk, vt, vp, df, dk, dt, dp, k, bend, mean):
        verify, verify_batch, verify_mean = prompt_pass(batch, vf, vk, vt, k + 1.0, bend,
                                                        vp, mean)
        if k <= 0:
            return verify, verify_batch, verify_mean
        floor = max(df, 1e-12)
        first, first_batch, first_mean = prompt_pass(batch, floor, dk, dt, k + 1.0, bend,
                                                     dp, mean)
        later, later_slope, _, _ = pass_parts(batch, floor, dk, dt, 1.0, bend)
        passes = max(k - 1.0, 0.0)
        return (verify + first + passes * later,
                verify_batch + first_batch + passes * later_slope, verify_mean + first_mean)

    @njit
    def excess_at(n, mean, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend,
                  alone_step, alone_slope, stall):
        h, h_n, h_mean = step(1.0 + n, vf, vk, vt, vp, df, dk, dt, dp, k, bend, mean)
        line_slope = alone_slope + alone_step * stall / max(c1, cycles * alone_step)
        excess = cycles * (h - alone_step - n * line_slope)
        excess_n = cycles * (h_n - line_slope)
        excess_mean = cycles * h_mean
        latency = c1 + c2 * n + excess
        residual = mean * latency - n * h
        residual_n = mean * (c2 + excess_n) - h - n * h_n
        residual_mean = latency + mean * excess_mean - n * h_mean
        return excess, excess_n, excess_mean, residual, residual_n, residual_mean, latency

    @njit
    def count_from(n, start, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend,
                   alone_step, alone_slope, stall):
        if vp <= 0.0 and dp <= 0.0:
            return 0.0
        mean = start
        if not mean >= 0.0:   # the decode step's count
            h, _, _ = step(1.0 + n, vf, vk, vt, vp, df, dk, dt, dp, k, bend, 0.0)
            latency = c1 + c2 * n + cycles * (h - alone_step - n * alone_slope)
            mean = max(n * h / max(latency, 1e-300), 0.0)
        for _ in range(count_steps):
            (_, _, _, residual, _, residual_mean,
             latency) = excess_at(n, mean, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k,
                                  cycles, bend, alone_step, alone_slope, stall)
            moved = -1.0
            if residual_mean > 0.0:
                moved = mean - residual / residual_mean
            if not moved >= 0.0:
                moved = max((mean * latency - residual) / max(latency, 1e-300), 0.0)
            settled = abs(moved - mean) <= 1e-13 * max(abs(moved), 1e-300)
            mean = moved
            if settled:
                break
        return mean

    @njit
    def alone_of(vf, vk, vt, vp, df, dk, dt, dp, k, bend):
        return step(1.0, vf, vk, vt, vp, df, dk, dt, dp, k, bend, 0.0)

    @njit
    def count(n, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend):
        a, b, s = alone_of(vf, vk, vt, vp, df, dk, dt, dp, k, bend)
        return count_from(n, -1.0, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend,
                          a, b, s)

    @njit
    def root(rps, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend):
        free = 1.0 - rps * c2
        if not free > 0:
            free = 1.0
        n = rps * c1
        a, b, s = alone_of(vf, vk, vt, vp, df, dk, dt, dp, k, bend)
        mean = -1.0
        for _ in range(steps + 1):
            mean = count_from(n, mean, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles,
                              bend, a, b, s)
            (excess, excess_n, excess_mean, _, residual_n, residual_mean,
             _) = excess_at(n, mean, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles, bend,
                            a, b, s)
            slope = excess_n
            if residual_mean > 0.0:
                slope = excess_n - excess_mean * residual_n / residual_mean
            residual = rps * (c1 + c2 * n + excess) - n
            derivative = rps * (c2 + slope) - 1.0
            moved = min(max(n - residual / min(derivative, -0.05 * free), 0.0), far)
            settled = abs(moved - n) <= 1e-13 * abs(moved) or moved >= far
            n = moved
            if settled:
                break
        return n, count_from(n, mean, c1, c2, vf, vk, vt, vp, df, dk, dt, dp, k, cycles,
                             bend, a, b, s)

    _NUMBA_KERNELS = {"root": root, "count": count}
    return _NUMBA_KERNELS
