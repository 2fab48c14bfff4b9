"""Sparse mixture-of-experts verifiers: eq. (4) (docs/laws.md, eq. (4)).

The share of experts a step's routed tokens touch, phi(T) = 1 - (1 - m/M)^T; the costs
split into an uncovered part and a coverage-saturating increment; the routed tokens per
verification; and the mean latency's least fixed point in numpy. The same least root
inside a PyMC graph is :func:`bayesspec.laws.moe_search.moe_latency_expr`.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from bayesspec.laws._numeric import _as_float
from bayesspec.laws.mean import latency_expr

__all__ = ["expert_coverage_expr", "moe_costs_expr", "expert_coverage",
           "verification_tokens", "moe_latency"]


def expert_coverage_expr(tokens, m, M, xp: ModuleType = np):
    """phi(T) = 1 - (1 - m/M)^T, computed as -expm1(T*log1p(-m/M)) for small m/M."""
    return -xp.expm1(tokens * xp.log1p(-m / M))


def moe_costs_expr(phi, c1u, c1s, c2u, c2s):
    """Eq. (4): costs split into an uncovered part and a coverage-saturating increment."""
    return c1u + phi * c1s, c2u + phi * c2s


def expert_coverage(tokens, m, M):
    """Share of experts touched when ``tokens`` are routed to m of M experts each."""
    tokens, m, M = _as_float(tokens, m, M)
    if np.any((m < 0) | (m > M) | (M <= 0)):
        raise ValueError("expert counts need 0 <= m <= M and M > 0")
    tokens = np.maximum(tokens, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = expert_coverage_expr(tokens, m, M)
    # No tokens (or no routed experts) cover nothing, also where the expression is
    # 0 * log(0) = nan (m = M with zero tokens, m = 0 with infinitely many).
    return np.where((tokens == 0.0) | (m == 0.0), 0.0, value)[()]


def verification_tokens(k, rule: str = "k+1"):
    """Routed tokens per request per step in eq. (4): 1 when dense (k = 0); per
    verification ``k`` (the paper's T = RPS*L*k) or ``k+1`` (the verifier's own token
    rides along). The ``tokens_per_request`` of :func:`moe_latency`."""
    k = np.asarray(k, dtype=float)
    if rule == "k":
        return np.where(k > 0, k, 1.0)[()]
    if rule == "k+1":
        return (k + 1.0)[()]
    raise ValueError(f"verify_tokens must be 'k' or 'k+1', got {rule!r}")


def moe_latency(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request=1.0, *,
                token_offset=0.0, rtol: float = 1e-13, max_iter: int = 200):
    """Mean latency of a sparse MoE model, eq. (4), solved for its least fixed point in L.

    The routed tokens per step T = token_offset + rps*L*tokens_per_request depend on L,
    so L solves L = (C1u + phi(T)*C1s)/(1 - rps*(C2u + phi(T)*C2s)). ``token_offset`` 1
    is the variant in which a request's own tokens count even alone (T = 1 + RPS*L);
    the paper's T = RPS*L is 0. Saturation is rps*(C2u + C2s) >= 1 (at high load every
    expert is touched, phi -> 1): ``inf``.

    Below saturation the fixed points are the roots of
    F(L) = C1u + phi(L)*(C1s + rps*C2s*L) - L*(1 - rps*C2u),
    phi(L) = 1 - exp(-(beta0 + beta*L)), beta = -rps*tokens_per_request*log(1 - m/M),
    beta0 = -token_offset*log(1 - m/M). The offset only scales the exponential by
    exp(-beta0), which moves neither the inflection below nor the sign argument.
    F >= 0 at the phi = 0 latency and
    F <= 0 at the phi = 1 latency, but eq. (4) can have three fixed points in that
    bracket. The served latency is the least one: the one that the load reaches when it
    rises from zero, and the limit of the iteration L <- rhs(L) from the phi = 0 latency.
    F is convex below L_i = 2/beta - C1s/(rps*C2s) and concave above, so with x the
    minimiser of F over the convex part of the bracket, the least root is the only root
    in [phi=0 latency, x] when F(x) <= 0, and the only root in [x, phi=1 latency]
    otherwise; a vectorised bisection finds it.
    """
    arrays = np.broadcast_arrays(
        *_as_float(rps, c1u, c1s, c2u, c2s, m, M, tokens_per_request, token_offset))
    shape = arrays[0].shape
    # flat copies: the solver below works on the shrinking set of unconverged entries
    rps, c1u, c1s, c2u, c2s, m, M, tpr, offset = [np.ravel(a) for a in arrays]
    saturated = rps * (c2u + c2s) >= 1.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        low = np.where(saturated, 1.0, latency_expr(rps, c1u, c2u))
        high = np.where(saturated, 1.0, latency_expr(rps, c1u + c1s, c2u + c2s))
        # beta = inf where every expert is routed (phi = 1 at any load), also when
        # rps*tokens_per_request underflows to 0
        routed = (rps > 0.0) & (tpr > 0.0) & (m > 0.0)
        beta = np.where(routed, np.where(m >= M, np.inf, -rps * tpr * np.log1p(-m / M)), 0.0)
        beta0 = np.where((offset > 0.0) & (m > 0.0),
                         np.where(m >= M, np.inf, -offset * np.log1p(-m / M)), 0.0)
        kappa = rps * c2s
        free = 1.0 - rps * c2u
        inflection = 2.0 / beta - c1s / kappa
        # no convex part where F is concave or linear (kappa = 0 or beta = 0), or where
        # the terms over/underflow (inf - inf): phi is then flat to double precision
        inflection = np.where((kappa > 0.0) & (beta > 0.0) & ~np.isnan(inflection),
                              inflection, -np.inf)
        convex_end = np.clip(inflection, low, high)
        everything = slice(None)

        def coverage(candidate, i):
            # phi(0) = phi(offset) also where beta is inf (m = M)
            return -np.expm1(-(beta0[i] + np.where(candidate > 0.0, beta[i] * candidate, 0.0)))

        def excess(candidate, i):  # rhs(L) - L = F(L)/(1 - rps*C2(phi)): the sign of F
            c1, c2 = moe_costs_expr(coverage(candidate, i), c1u[i], c1s[i], c2u[i], c2s[i])
            return latency_expr(rps[i], c1, c2) - candidate

        def slope(candidate, i):  # F'(L), increasing on the convex part
            phi = coverage(candidate, i)
            return beta[i] * (1.0 - phi) * (c1s[i] + kappa[i] * candidate) + phi * kappa[i] - free[i]

        def curvature(candidate, i):  # F''(L), positive on the convex part
            phi = coverage(candidate, i)
            return beta[i] * (1.0 - phi) * (2.0 * kappa[i] - beta[i] * (c1s[i] + kappa[i] * candidate))

        def residual(candidate, i):  # F(L)
            phi = coverage(candidate, i)
            return c1u[i] + phi * (c1s[i] + kappa[i] * candidate) - candidate * free[i]

        def solve(lo, hi, go_up, value, derivative):
            """Safeguarded Newton: the bracket [lo, hi] shrinks by the sign test at every
            step (so the least root stays the one found); a Newton step is taken only
            when it stays inside the bracket and is no longer than the previous step,
            otherwise the midpoint. Far fewer steps than plain bisection, and only the
            unconverged entries are carried on, which matters when decisions solve
            millions of (draw, k, rate) points."""
            lo, hi = lo.copy(), hi.copy()
            x = 0.5 * (lo + hi)
            previous = np.abs(hi - lo)
            i = np.arange(x.size)
            for _ in range(max_iter):
                xi, loi, hii = x[i], lo[i], hi[i]
                up = go_up(xi, i)
                loi = np.where(up, xi, loi)
                hii = np.where(up, hii, xi)
                correction = value(xi, i) / derivative(xi, i)
                # x is the root to rtol: done (a Newton step from a point within an ulp
                # of the root can land just outside the bracket, which would bisect away)
                close = np.abs(correction) <= rtol * np.abs(xi)
                newton = xi - correction
                # a root at a bracket end (phi flat at 1) puts Newton an ulp past it
                slack = 4.0 * np.spacing(np.abs(hii))
                use = ((newton >= loi - slack) & (newton <= hii + slack)
                       & (np.abs(correction) <= previous[i]))
                new = np.where(close, xi, np.where(use, np.clip(newton, loi, hii),
                                                   0.5 * (loi + hii)))
                step = np.abs(new - xi)
                converged = close | (step <= rtol * np.abs(new)) | ((hii - loi) <= rtol * np.abs(hii))
                x[i], lo[i], hi[i], previous[i] = new, loi, hii, step
                i = i[~converged]
                if i.size == 0:
                    break
            return x

        # F' is increasing on [low, convex_end]: its minimiser is an end unless F'
        # changes sign inside (otherwise Newton would only push outwards)
        at_end = slope(convex_end, everything) < 0.0
        at_low = ~at_end & (slope(low, everything) >= 0.0)
        inside = ~(at_end | at_low)
        lowest = solve(np.where(at_end, convex_end, low),
                       np.where(inside | at_end, convex_end, low),
                       lambda x, i: slope(x, i) < 0.0, slope, curvature)
        dips = excess(lowest, everything) <= 0.0
        result = solve(np.where(dips, low, lowest), np.where(dips, lowest, high),
                       lambda x, i: excess(x, i) > 0.0, residual, slope)
    return np.where(saturated, np.inf, result).reshape(shape)[()]
