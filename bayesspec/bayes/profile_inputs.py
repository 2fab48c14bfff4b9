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


#: The mean laws a model may be asked for (``mean_law``): "auto", the compute roof in a
#: fit with speculative groups where the cards of the verifier and the GPU exist, eq. (1)
#: elsewhere; "roofline", the roof (an error naming a group without cards); "eq1",
#: eq. (1) alone.
MEAN_LAWS = ("auto", "roofline", "eq1")

#: The roof's learned factors: real stacks run at about twice the cards' bounds (a 32B
#: verifier on one H100 decoded at about 2x the bandwidth bound in a public load test;
#: attention, launches and partial overlap put decode GEMMs near half of peak FLOP/s), a
#: log-sd of 0.5 admitting 0.75x-5.3x at 95%. ``roof_bend``: how much the marginal cost
#: keeps rising past the knee (bounded: :data:`bayesspec.laws.roofline.ROOF_BEND_REACH`),
#: half-normal; 0 is the plain roofline. Its scale is what the same public load test
#: admits: its marginal cost per token at k = 6 (0.06, 0.11, 0.14 ms from 16-32, 32-64,
#: 64-128 in flight) fits this join with bends of 0 to 0.2 at factors of at least 1
#: (larger bends need a stack faster than the cards' bounds; docs/findings/compute-roof.md,
#: "The bend bounded").
ROOF_FACTOR_MEDIAN = 2.0
ROOF_FACTOR_LOG_SD = 0.5
ROOF_BEND_SCALE = 0.1


def roof_inputs(rows: pd.DataFrame, groups: pd.DataFrame, group_index: np.ndarray, catalog,
                how: str, *, cycles_known: bool) -> str:
    """Which groups follow the compute roof (``groups["mean_law"]`` "roof" or "eq1") and
    their cards' bounds (``groups`` columns of
    :data:`bayesspec.laws.roofline.ROOF_CARD_FIELDS`, ``roof_cycles``: engine steps of
    one request, NaN where the model learns acceptance). Returns the one line ``fit``
    says about it.

    A group follows the roof where its verifier and its GPU have cards and no decode
    profile is stated for it (a measured profile is the better law); where the engine's
    cap is stated too, the roof and the cap are one law
    (:func:`bayesspec.laws.roofline.roof_slot_queue_latency_expr`). ``how``: one of
    :data:`MEAN_LAWS`; with "roofline" a group without what the roof needs is an error.
    ``cycles_known``: whether acceptance is known from the table (the dense model), else
    the graph computes the cycles."""
    from bayesspec.errors import BadInput
    from bayesspec.laws import expected_accepted
    from bayesspec.laws.roofline import ROOF_CARD_FIELDS, roof_card_values

    n = len(groups)
    groups["mean_law"] = "eq1"
    for name in ROOF_CARD_FIELDS + ("roof_cycles",):
        groups[name] = np.nan
    if how == "eq1" or n == 0:
        return "mean law: eq. (1) (mean_law=eq1)"
    speculative = "k" in groups and bool((pd.to_numeric(groups["k"]) > 0).any())
    if how == "auto" and not speculative:
        # A step of plain decoding carries one token a request: at the batches one
        # instance holds its KV reads keep pace with its arithmetic, and the roof was
        # validated where speculation reaches it k + 1 times sooner
        # (docs/findings/compute-roof.md).
        return ("mean law: eq. (1): plain decoding only (--option mean_law=roofline puts "
                "the compute roof on it)")
    reasons: list[str] = []
    gpu_of = (rows["gpu"].astype(object) if "gpu" in rows.columns
              else pd.Series([None] * len(rows)))
    for g in range(n):
        row = groups.iloc[g]
        first = int(np.flatnonzero(group_index == g)[0])
        gpu_name = gpu_of.iloc[first]
        verifier = catalog.find_model(str(row["verifier"]))
        gpu = (catalog.find_gpu(str(gpu_name))
               if isinstance(gpu_name, str) and gpu_name else None)
        k = float(row.get("k", 0) or 0)
        drafter = None
        if k > 0 and isinstance(row.get("drafter"), str) and row["drafter"]:
            drafter = catalog.find_model(str(row["drafter"]))
        why = ""
        if bool(row.get("decode_profile", False)):
            why = "a measured decode profile is its law"
        elif verifier is None:
            why = f"no card for the verifier {row['verifier']}"
        elif gpu is None:
            why = ("no gpu column" if not isinstance(gpu_name, str) or not gpu_name
                   else f"no card for the GPU {gpu_name}")
        elif k > 0 and drafter is None:
            why = f"no card for the drafter {row.get('drafter') or '(none named)'}"
        cycles = float(row["decode_tokens"])
        if not why and k > 0 and cycles_known:
            alpha = float(row.get("alpha", np.nan))
            if not np.isfinite(alpha):
                why = "acceptance unknown"
            else:
                cycles = cycles / float(expected_accepted(alpha, k))
        if why:
            if how == "roofline":
                raise BadInput(f"mean_law=roofline: group '{row['label']}' cannot follow "
                               f"the compute roof: {why}", option="--option")
            reasons.append(why)
            continue
        values = roof_card_values(verifier, gpu, drafter,
                                  prefill_tokens=float(row["prefill_tokens"]),
                                  decode_tokens=float(row["decode_tokens"]))
        for name, value in values.items():
            groups.loc[groups.index[g], name] = value
        groups.loc[groups.index[g], "roof_cycles"] = (cycles if (k == 0 or cycles_known)
                                                      else np.nan)
        groups.loc[groups.index[g], "mean_law"] = "roof"
    count = int((groups["mean_law"] == "roof").sum())
    if count == 0:
        common = max(set(reasons), key=reasons.count) if reasons else ""
        return f"mean law: eq. (1): {common}"
    what = "the compute roof from the cards (eq. (1) plus the step's roofline past its knee)"
    roofed = (groups["mean_law"] == "roof").to_numpy(bool)
    caps = (groups["cap"].to_numpy(float) if "cap" in groups
            else np.full(n, np.inf))
    with_cap = int(np.count_nonzero(roofed & np.isfinite(caps)))
    if with_cap:
        what += (f", with the engine's cap stated in {with_cap}: the slot queue's waiting "
                 "line past it")
    if count == n:
        return f"mean law: {what}, all {n} group(s)"
    common = max(set(reasons), key=reasons.count)
    return f"mean law: {what} in {count} of {n} group(s); eq. (1) in the rest ({common})"


def roof_arrays(groups: pd.DataFrame) -> dict[str, tuple[np.ndarray, str | None]]:
    """The roof's per-group inputs as the graph takes them (``has_roof`` and the cards'
    bounds, zeros where a group has none)."""
    from bayesspec.laws.roofline import ROOF_CARD_FIELDS

    has = (groups["mean_law"] == "roof").to_numpy(bool)
    arrays = {"has_roof": (has.astype(float), "group"),
              "roof_k": (groups["k"].to_numpy(float) if "k" in groups
                         else np.zeros(len(groups)), "group")}
    for name in ROOF_CARD_FIELDS:
        values = groups[name].to_numpy(float)
        # a stand-in that keeps the graph finite where the group has no roof
        arrays[f"roof_{name}"] = (np.where(has, values, 1.0), "group")
    cycles = groups["roof_cycles"].to_numpy(float)
    arrays["roof_cycles"] = (np.where(np.isfinite(cycles), cycles, 1.0), "group")
    return arrays


def roof_factors():
    """The roof's learned factors in the current ``pm.Model``: the stack's seconds over
    the memory and the compute bounds, and the bend past the knee (one of each per fit:
    one serving stack's efficiency)."""
    import pymc as pm

    memory = pm.LogNormal("roof_memory_factor", np.log(ROOF_FACTOR_MEDIAN),
                          ROOF_FACTOR_LOG_SD)
    compute = pm.LogNormal("roof_compute_factor", np.log(ROOF_FACTOR_MEDIAN),
                           ROOF_FACTOR_LOG_SD)
    bend = pm.HalfNormal("roof_bend", ROOF_BEND_SCALE)
    return memory, compute, bend


def scaled_roof(cards: dict, memory_factor, compute_factor) -> dict:
    """The cards' bounds in the stack's seconds: memory terms times the memory factor,
    arithmetic times the compute factor."""
    from bayesspec.laws.roofline import ROOF_COMPUTE_FIELDS

    return {name: value * (compute_factor if name in ROOF_COMPUTE_FIELDS else memory_factor)
            for name, value in cards.items()}


#: How softly the light-load bound holds (:func:`floor_within_light_load`): a log-scale
#: width, so a floor 3% past its group's light-load steps costs the log density about 1.3
#: and one 10% past it about 3.3.
LIGHT_LOAD_BOUND_WIDTH = 0.03


def floor_within_light_load(c1, roof: dict, k, bend, cycles, has_roof):
    """The roof's steps alone cannot outlast the light-load latency: per roof group,
    cycles x the step of one request alone (the weights streamed, its KV read, its
    arithmetic, at the learned factors) <= C1, which adds the prompt's prefill and the
    stack's overheads. Below the knee the latency's curvature says where the knee is (the
    memory factor over the compute factor) but hardly how slow the stack is, and without
    this bound the factors' level stayed near their prior's median, above the stack's,
    which put the full batch's arithmetic too slow and the ceiling too low
    (docs/findings/compute-roof.md, "The floor bounded by the light load"). A soft bound
    (:data:`LIGHT_LOAD_BOUND_WIDTH`), added to the model as a potential. Per group:
    ``c1``, ``roof`` (the cards in the stack's seconds), ``k``, ``cycles``, ``has_roof``."""
    import pymc as pm
    import pytensor.tensor as pt

    from bayesspec.laws.roofline import roof_step_expr

    alone, _ = roof_step_expr(1.0, roof, k, bend, xp=pt)
    room = (pt.log(c1) - pt.log(cycles * alone)) / LIGHT_LOAD_BOUND_WIDTH
    pm.Potential("roof_floor_within_light_load",
                 pt.sum(pt.where(has_roof > 0, -pt.softplus(-room), 0.0)))


def roof_mean_law(c1, c2, data: dict, cycles=None):
    """(mean latency per point, the C2 each point feels) of eq. (1) with the compute roof
    in the groups that have it (eq. (1) elsewhere), in the current ``pm.Model``: the
    ``mean_latency`` and ``c2_point`` :func:`bayesspec.bayes.priors.latency_likelihood`
    takes. ``cycles`` (per group): a request's engine steps where the graph knows them
    (the decode length over the learned E), else the data's ``roof_cycles``."""
    import pytensor.tensor as pt

    from bayesspec.laws import latency_expr
    from bayesspec.laws.roofline import ROOF_CARD_FIELDS, roof_concurrency_graph

    memory, compute, bend = roof_factors()
    index, rps = data["group_index"], data["rps"]
    group_cycles = data["roof_cycles"] if cycles is None else cycles
    group_roof = scaled_roof({name: data[f"roof_{name}"] for name in ROOF_CARD_FIELDS},
                             memory, compute)
    floor_within_light_load(c1, group_roof, data["roof_k"], bend, group_cycles,
                            data["has_roof"])
    roof = {name: value[index] for name, value in group_roof.items()}
    steps = group_cycles[index]
    point_c1, point_c2 = c1[index], c2[index]
    n, felt = roof_concurrency_graph(rps, point_c1, point_c2, roof, data["roof_k"][index],
                                     steps, bend)
    has = data["has_roof"][index] > 0
    mean = pt.where(has, n / rps, latency_expr(rps, point_c1, point_c2))
    # the likelihood's rate-error term x/(1 - x) stays finite past the roof's ceiling
    felt = pt.minimum(felt, 0.999 / rps)
    felt = pt.where(has, felt, point_c2)
    if "cap" not in data:
        return mean, felt
    return _capped_mean_law(mean, felt, n, point_c1, point_c2, roof, steps, bend, has, data)


def _capped_mean_law(mean, felt, n, c1, c2, roof, cycles, bend, has_roof, data):
    """:func:`roof_mean_law` where the engine's cap reaches the data (``data["cap"]``):
    the roof's groups on :func:`bayesspec.laws.roofline.roof_slot_queue_latency_expr`,
    the others on the slot queue. The likelihood reads a point's sensitivity to its rate
    as x/(1 - x) at the C2 it feels, so the capped law's elasticity e (a central
    difference, as the slot queue's) is passed as the C2 with that x/(1 - x):
    e / (RPS (1 + e))."""
    import pytensor.tensor as pt

    from bayesspec.bayes.priors import CAP_MARGIN
    from bayesspec.laws import load_elasticity_expr, slot_queue_latency_expr
    from bayesspec.laws.roofline import roof_slot_queue_latency_expr

    index, rps = data["group_index"], data["rps"]
    cap, wait = data["cap"][index], data["wait_scale"][index]
    has_cap = data["has_cap"][index] > 0
    # the least root's growth with the rate, d log N / d log RPS = 1/(1 - RPS L'(N)),
    # so that the difference quotient moves N with the rate as the law does
    growth = 1.0 / (1.0 - rps * felt)

    def roof_queue(at):
        return roof_slot_queue_latency_expr(at, c1, c2, cap, roof, data["roof_k"][index],
                                            cycles, bend, n * (at / rps) ** growth, xp=pt,
                                            wait_scale=wait, soft_margin=CAP_MARGIN)

    def slot_queue(at):
        return slot_queue_latency_expr(at, c1, c2, cap, xp=pt, wait_scale=wait,
                                       soft_margin=CAP_MARGIN)

    def as_felt(elasticity):
        return elasticity / (rps * (1.0 + elasticity))

    roofed = np.asarray(data["has_roof"].get_value()) > 0
    capped = np.asarray(data["has_cap"].get_value()) > 0
    if (roofed & capped).any():
        with_roof = has_cap & has_roof
        mean = pt.where(with_roof, roof_queue(rps), mean)
        felt = pt.where(with_roof, as_felt(load_elasticity_expr(roof_queue, rps, xp=pt)),
                        felt)
    if (capped & ~roofed).any():
        without = has_cap & ~has_roof
        mean = pt.where(without, slot_queue(rps), mean)
        felt = pt.where(without, as_felt(load_elasticity_expr(slot_queue, rps, xp=pt)),
                        felt)
    return mean, felt
