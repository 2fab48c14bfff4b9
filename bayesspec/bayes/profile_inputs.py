"""A measured decode-iteration profile (:mod:`bayesspec.data.decode_profile`) as a model
takes it: matched to the fitted groups, in linear pieces for the likelihood, and as the
arrays of the birth-death chain law.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def decode_profile_inputs(path, rows: pd.DataFrame, groups: pd.DataFrame,
                          group_index: np.ndarray) -> dict:
    """The decode-iteration profile of ``path`` (:mod:`bayesspec.data.decode_profile`) matched
    to the groups (``groups["decode_profile"]`` set), as the likelihood takes it: each
    group's profile in linear pieces (:func:`bayesspec.laws.profile_segments`), on which
    the graph solves the law's own N, and each row's shift at its measured N = RPS x L,
    used only where a draw has no root there. Returns the model inputs' extras
    ``profile_sizes``, ``profile_times`` (G, K), the
    pieces ``profile_knots``, ``profile_values``, ``profile_slopes`` (G, J) and
    ``profile_shift`` (rows)."""
    from bayesspec.data.decode_profile import group_profile, match_profiles, read_decode_profile
    from bayesspec.laws import PROFILE_PAD_KNOT, decode_profile_shift, profile_segments

    table = read_decode_profile(path)
    sizes, times = match_profiles(rows, group_index, len(groups), table)
    has = np.isfinite(sizes).any(axis=1)
    groups["decode_profile"] = has
    concurrency = (rows["rps"] * rows["latency_mean_s"]).to_numpy(float)
    decode = pd.to_numeric(rows["decode_tokens"], errors="coerce").to_numpy(float)
    caps = groups["cap"].to_numpy(float)
    shift = np.zeros(len(rows))
    pieces = {}
    for g in np.flatnonzero(has):
        member = group_index == g
        batch_sizes, seconds = group_profile(sizes, times, g)
        shift[member] = decode_profile_shift(concurrency[member], decode[member],
                                             batch_sizes, seconds, caps[g])
        pieces[g] = profile_segments(decode[member][0], batch_sizes, seconds, caps[g])
    width = max(len(p[0]) for p in pieces.values()) if pieces else 1
    knots = np.full((len(groups), width), PROFILE_PAD_KNOT)
    values = np.zeros((len(groups), width))
    slopes = np.zeros((len(groups), width))
    for g, (k, v, sl) in pieces.items():
        knots[g, :len(k)], values[g, :len(k)], slopes[g, :len(k)] = k, v, sl
    return {"profile_sizes": sizes, "profile_times": times, "profile_shift": shift,
            "profile_knots": knots, "profile_values": values, "profile_slopes": slopes}


def profile_chain_arrays(inputs) -> dict[str, tuple[np.ndarray, str | None]]:
    """The decode profile as the birth-death chain takes it
    (:func:`bayesspec.laws.profile_chain_latency_expr`), per group: ``chain_extra`` (G, K),
    the profile's added seconds at n = 1..cap in flight, ``chain_valid`` (G, K), 1 for
    n <= cap, and ``has_chain`` (G,). K is the largest cap; a group without a profile or
    a cap gets a one-slot stand-in that the graph does not select. For the batched
    prefill's stall (``prefill_batching``): ``chain_decode_s`` (G, K), the profile's
    seconds per decode iteration at n = 1..K in flight, and ``chain_decode_one`` (G,),
    at one."""
    from bayesspec.data.decode_profile import group_profile
    from bayesspec.laws import _profile_time, profile_chain_extra

    groups = inputs.groups
    caps = groups["cap"].to_numpy(float) if "cap" in groups else np.full(len(groups), np.inf)
    has = groups.get("decode_profile", pd.Series(False, index=groups.index)).to_numpy(bool)
    has = has & np.isfinite(caps)
    width = int(caps[has].max()) if has.any() else 1
    extra = np.zeros((len(groups), width))
    valid = np.zeros((len(groups), width))
    valid[:, 0] = 1.0
    decode_s = np.ones((len(groups), width))
    for g in np.flatnonzero(has):
        sizes, times = group_profile(inputs.extras["profile_sizes"],
                                     inputs.extras["profile_times"], g)
        cap = int(caps[g])
        extra[g, :cap] = profile_chain_extra(float(groups["decode_tokens"].iloc[g]), sizes,
                                             times, cap)
        valid[g, :cap] = 1.0
        decode_s[g] = _profile_time(np.arange(1.0, width + 1.0), sizes, times)
    return {"chain_extra": (extra, None), "chain_valid": (valid, None),
            "has_chain": (has.astype(float), "group"),
            "chain_decode_s": (decode_s, None),
            "chain_decode_one": (decode_s[:, 0].copy(), "group")}
