"""The engine's concurrency cap as a parameter, where the data do not state it.

A vLLM-style engine batches at most ``max_num_seqs`` requests and as many as its KV cache
holds; the smaller binds first and bends the latency curve upward (the slot queue of
:func:`bayesspec.laws.slot_queue_latency_expr`). A load test that does not record either
limit still shows the bend, so the cap can be learned from the curve, given a prior on
where it might be:

- ``catalog``: the KV cache that fits next to the verifier's weights on its GPU (the
  catalog's cards, :func:`bayesspec.data.catalog.kv_cache_tokens_estimate`) over a request's
  footprint, or vLLM's default ``max_num_seqs`` (256 or 1024, by version and GPU)
  whichever is smaller; a log-sd of 1 (a factor 2.7) for what the cards cannot know
  (``gpu_memory_utilization``, a lowered ``max_num_seqs``). A verifier whose weights do
  not fit on one GPU (tensor parallelism) gets the wide prior instead, and says so.
- ``wide``: vLLM's default ``max_num_seqs`` with a log-sd of 1.5 (95% from 27 to 9,600).

Where the data reach the bend the posterior is the data's; where they do not it stays
the prior, and the ceiling (min(1/C2, the cap's throughput), per draw) carries that
uncertainty instead of reading the far pole 1/C2 as the ceiling.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bayesspec.laws import kv_tokens_per_request

#: The posterior variable of the caps a fit learned, and its dimension (the groups whose
#: cap was learned).
LEARNED_CAP = "learned_cap"
LEARNED_CAP_DIM = "learned_cap_group"
#: ``--cap-prior`` values: ``none`` keeps the cap unknown (eq. (1) alone).
CAP_PRIORS = ("none", "catalog", "wide")
#: vLLM's default max_num_seqs: 256 (V0, and V1 on smaller GPUs) or 1024 (V1 on 70 GiB+).
DEFAULT_MAX_NUM_SEQS = (256, 1024)
CATALOG_LOG_SD = 1.0
WIDE_LOG_SD = 1.5


def _default_seqs_centre() -> float:
    low, high = DEFAULT_MAX_NUM_SEQS
    return math.sqrt(low * high)


def learned_cap_priors(groups: pd.DataFrame, catalog, how: str):
    """Per group: (log centre, log sd, words for the fit record) of the cap's prior.
    ``groups``: one row per group with its verifier, gpu, drafter, k and lengths."""
    if how not in CAP_PRIORS[1:]:
        raise ValueError(f"cap prior must be one of {CAP_PRIORS[1:]}, got {how!r}")
    seqs = _default_seqs_centre()
    centres, sds, words = [], [], []
    kv_by_setup: dict = {}
    for row in groups.to_dict("records"):
        centre, sd = seqs, WIDE_LOG_SD
        text = (f"learned from the curve; wide prior around vLLM's default max_num_seqs "
                f"({seqs:.0f}, log-sd {WIDE_LOG_SD:g})")
        if how == "catalog":
            key = (str(row.get("verifier", "")), str(row.get("gpu", "")),
                   str(row.get("drafter", "")) if int(row.get("k", 0) or 0) > 0 else "")
            if key not in kv_by_setup:
                kv_by_setup[key] = _catalog_kv_tokens(catalog, *key)
            kv, why = kv_by_setup[key]
            footprint = kv_tokens_per_request(_number(row.get("prefill_tokens")),
                                              _number(row.get("decode_tokens")),
                                              int(row.get("k", 0) or 0))
            if kv is not None and np.isfinite(footprint) and footprint > 0:
                by_kv = kv / float(footprint)
                centre, sd = min(seqs, by_kv), CATALOG_LOG_SD
                text = (f"learned from the curve; catalog prior {centre:.0f} requests "
                        f"(the smaller of {kv:.0f} KV-cache tokens / {float(footprint):.0f} "
                        f"per request and vLLM's default max_num_seqs {seqs:.0f}; log-sd "
                        f"{CATALOG_LOG_SD:g})")
            else:
                text += f" ({why})"
        centres.append(math.log(centre))
        sds.append(sd)
        words.append(text)
    return np.asarray(centres), np.asarray(sds), words


def _number(value) -> float:
    value = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return float(value) if pd.notna(value) else float("nan")


def _catalog_kv_tokens(catalog, verifier: str, gpu: str, drafter: str):
    """(KV-cache tokens from the catalog's cards, None and why not)."""
    from bayesspec.data.catalog import kv_cache_tokens_estimate

    if catalog is None or not verifier or not gpu:
        return None, "no verifier or GPU to look up in the catalog"
    verifier_card = catalog.find_model(verifier)
    gpu_card = catalog.find_gpu(gpu)
    if verifier_card is None or gpu_card is None:
        missing = verifier if verifier_card is None else gpu
        return None, f"the catalog has no card for {missing}"
    drafter_card = catalog.find_model(drafter) if drafter else None
    tokens = kv_cache_tokens_estimate(verifier_card, gpu_card, drafter_card)
    if tokens is None:
        return None, (f"{verifier_card.name} does not fit on one {gpu_card.name}: tensor "
                      "parallelism is not in the catalog")
    return tokens, ""


def chains_disagree(fit) -> str | None:
    """Words for a learned cap whose chains settled on different explanations (a cap at
    the bend, or none within reach of the data and a steeper C2), or None.

    The two are separate modes when the sweep stops near the bend, and a chain that
    wanders into the second during warm-up stays there: R-hat then says "not converged",
    and this says why and what would settle it."""
    if LEARNED_CAP not in fit.posterior:
        return None
    draws = fit.posterior[LEARNED_CAP]
    medians = draws.median(dim="draw").values          # (chain, learned group)
    labels = [str(v) for v in draws[draws.dims[-1]].values]
    lines = []
    for j, label in enumerate(labels):
        per_chain = medians[:, j]
        if np.nanmax(per_chain) > 2.0 * np.nanmin(per_chain):
            shown = ", ".join(f"{value:.0f}" for value in per_chain)
            lines.append(f"{label}: the chains' learned caps disagree (medians {shown}): "
                         "the data allow a cap at the bend or none within reach; measure "
                         "past the bend, or state the cap (--max-num-seqs / "
                         "--kv-cache-tokens)")
    return "; ".join(lines) or None
