"""Two fits compared (e.g. two engine versions): ratios B/A with probabilities
(CONTRACT ``compare``).

What is compared is what each fit's model class says is comparable
(``model.comparable_parameters(fit)``: families such as C1 and C2 per group, the six
cycle coefficients per setup); a joint two-version fit answers through its own model
(``model.version_comparison``).
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInput
from ..uncertainty import DEFAULT_PROB, ratio_entry

# Families summarised over every shared entry (geometric mean of the ratios).
POOLED_FAMILIES = ("C1", "C2")


def _check_rope(rope: float) -> None:
    if not 0.0 <= rope < 1.0:
        raise BadInput(f"must be within [0, 1), got {rope}", argument="rope")


def compare_fits(fit_a, fit_b, *, rope: float = 0.02, prob: float = DEFAULT_PROB,
                 seed: int = 0) -> dict:
    """CONTRACT ``compare``: B relative to A for every parameter both fits hold.

    The two posteriors are independent, so ratio draws pair each draw of B with a random
    draw of A. ``C1``/``C2`` alone are the geometric mean ratio over shared groups.
    """
    _check_rope(rope)
    params_a = fit_a.model().comparable_parameters(fit_a)
    params_b = fit_b.model().comparable_parameters(fit_b)
    shared_groups = [label for label in params_a.get("C1", {}) if label in params_b.get("C1", {})]
    if not shared_groups:
        raise BadInput("the two fits share no group (compare fits of the same verifier, "
                       "drafter, lengths and (alpha, k))")
    rng = np.random.default_rng(seed)
    parameters = {}
    pooled = {name: [] for name in POOLED_FAMILIES}
    for family, entries_a in params_a.items():
        entries_b = params_b.get(family, {})
        for label, draws_a in entries_a.items():
            if label not in entries_b:
                continue
            draws_b = entries_b[label]
            ratio = draws_b / rng.choice(draws_a, size=draws_b.size, replace=True)
            parameters[f"{family}[{label}]"] = ratio_entry(ratio, rope, prob)
            if family in pooled:
                pooled[family].append(np.log(ratio))
    for family, logs in pooled.items():
        parameters[family] = ratio_entry(np.exp(np.mean(logs, axis=0)), rope, prob)
    # The headline families first, then the entries.
    parameters = {**{f: parameters[f] for f in POOLED_FAMILIES},
                  **{k: v for k, v in parameters.items() if k not in POOLED_FAMILIES}}
    verdict = (f"C1 {parameters['C1']['verdict']}; C2 {parameters['C2']['verdict']} "
               f"(geometric mean over {len(shared_groups)} shared groups)")
    return {"parameters": parameters, "verdict": verdict, "shared_groups": len(shared_groups),
            "rope": rope, "prob": prob}


def compare_versions(fit, *, rope: float = 0.02, prob: float = DEFAULT_PROB) -> dict:
    """CONTRACT ``compare`` from one joint fit of two versions (``--by COLUMN``)."""
    _check_rope(rope)
    return fit.model().version_comparison(fit, rope=rope, prob=prob)
