"""The roofline trends of eq. (3)'s cycle coefficients (docs/laws.md, eq. (3)), as algebra.

Each cycle coefficient is a sum of positive terms, a covariate (parameters in billions,
tokens in thousands) times a rate; the roofline gives each rate's physical value from a
GPU card (bandwidth, peak FLOP/s) and the verifiers' cards (KV bytes per token). The
hierarchical model (:mod:`bayesspec.bayes.hierarchical`) puts priors around these values
and builds its graph with the same functions; :mod:`bayesspec.simulate.synthetic` generates data
from them with known truth. numpy or pytensor arrays alike.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TREND_TERMS", "TERM_NAMES", "covariates", "trend_coefficients",
           "physics_centres"]

# (coefficient, term name, covariate) for every positive term, in a fixed order.
TREND_TERMS = (
    ("c1p", "overhead", "one"),
    ("c1p", "weights", "verifier_b"),
    ("c1p", "prefill_compute", "verifier_b*prefill_k"),
    ("c1v", "overhead", "one"),
    ("c1v", "weights", "verifier_b"),
    ("c2p", "overhead", "one"),
    ("c2p", "prefill_compute", "verifier_b*prefill_k"),
    ("c2v", "token_compute", "verifier_b"),
    ("c2v", "kv_reads", "context_k"),
    ("c2v", "kv_reads_by_size", "verifier_b*context_k"),
    ("c1d", "overhead", "one"),
    ("c1d", "weights", "drafter_b"),
    ("c2d", "overhead", "one"),
    ("c2d", "token_compute", "drafter_b"),
    ("c2d", "verify_compute", "verifier_b"),
)
TERM_NAMES = tuple(f"{c}.{t}" for c, t, _ in TREND_TERMS)


def covariates(verifier_b, drafter_b, prefill_tokens, decode_tokens, xp=np) -> dict:
    """The trend covariates (parameters in billions, tokens in thousands)."""
    prefill_k = prefill_tokens / 1000.0
    context_k = (prefill_tokens + 0.5 * decode_tokens) / 1000.0
    return {"one": 1.0, "verifier_b": verifier_b, "drafter_b": drafter_b,
            "verifier_b*prefill_k": verifier_b * prefill_k, "context_k": context_k,
            "verifier_b*context_k": verifier_b * context_k}


def trend_coefficients(rates, covariate_values: dict) -> dict:
    """The six coefficients before deviations: sum over terms of rate x covariate.

    ``rates`` is indexable by term position (numpy array or pytensor vector, last axis
    for draws-first numpy arrays); the same function builds the PyMC graph and the numpy
    predictions of configurations nobody measured.
    """
    out = {}
    for i, (coefficient, _, covariate) in enumerate(TREND_TERMS):
        term = rates[..., i] * covariate_values[covariate]
        out[coefficient] = term if coefficient not in out else out[coefficient] + term
    return out


def physics_centres(gpu_card, verifier_cards) -> dict[str, float]:
    """Roofline values of each trend rate, in seconds per covariate unit."""
    bandwidth = gpu_card.hbm_bandwidth_bytes_s
    flops = gpu_card.peak_bf16_flops
    weights = 2e9 / bandwidth                     # one pass over 1B bf16 parameters
    token_compute = 2e9 / flops                   # 2 FLOP per parameter per token
    kv_bytes = [c.kv_bytes_per_token for c in verifier_cards if c is not None]
    kv_per_k = (float(np.median(kv_bytes)) if kv_bytes else 1.3e5) * 1000.0 / bandwidth
    size = float(np.median([c.params_total_b for c in verifier_cards if c is not None]
                           or [8.0]))
    return {
        "c1p.overhead": 2e-3, "c1p.weights": weights,
        "c1p.prefill_compute": token_compute * 1000.0,
        "c1v.overhead": 1e-3, "c1v.weights": weights,
        "c2p.overhead": 1e-4, "c2p.prefill_compute": token_compute * 1000.0,
        "c2v.token_compute": token_compute, "c2v.kv_reads": 0.7 * kv_per_k,
        "c2v.kv_reads_by_size": 0.3 * kv_per_k / size,
        "c1d.overhead": 1e-3, "c1d.weights": weights,
        "c2d.overhead": 2e-5, "c2d.token_compute": token_compute,
        "c2d.verify_compute": token_compute,
    }
