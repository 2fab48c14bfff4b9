"""Equation-generated sweeps with known truth, for tests and the placeholder dataset.

The mechanistic serving simulator lives in :mod:`bayesspec.simulate`; this module
generates data from the latency law itself, so a fit can be checked against the exact
coefficients that produced the data. The noise is realistic rather than textbook:

- the achieved rate carries a relative error (the scheduler, a short window), and the
  latency is the law evaluated at the *effective* rate, so the error in log L is
  amplified by x/(1-x) near saturation;
- each mean is over ``n_requests`` requests whose spread grows with load (queueing);
- a small load-independent multiplicative error (run-to-run drift).

Rates follow GuideLLM's sweep profile: a synchronous run (one request at a time), a
throughput run at the ceiling (saturated, flagged), and evenly spaced rates between.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


# H100 SXM figures (see models/gpu); used only to give the placeholder truth a
# realistic magnitude.
_HBM_BYTES_PER_S = 3.35e12
_USABLE_FLOP_PER_S = 0.45 * 989e12
_STEP_OVERHEAD_S = 0.004


def roofline_costs(params_b: float, prefill_tokens: int, decode_tokens: int,
                   kv_bytes_per_token: float) -> tuple[float, float]:
    """Rough (C1, C2) of a dense verifier on an H100 from a roofline argument.

    C1: prefill compute plus one weight-streaming decode step per output token.
    C2: what one more concurrent request adds: its share of every decode step (KV reads
    over the average cache, its FLOPs) and its prefill compute.
    """
    flop_per_token = 2.0 * params_b * 1e9
    step_s = params_b * 1e9 * 2 / _HBM_BYTES_PER_S + _STEP_OVERHEAD_S
    prefill_s = prefill_tokens * flop_per_token / _USABLE_FLOP_PER_S
    c1 = prefill_s + decode_tokens * step_s
    mean_context = prefill_tokens + 0.5 * decode_tokens
    per_step_s = (kv_bytes_per_token * mean_context / _HBM_BYTES_PER_S
                  + flop_per_token / _USABLE_FLOP_PER_S)
    c2 = decode_tokens * per_step_s + prefill_s
    return c1, c2


def sweep_rates(c1: float, c2: float, n_rates: int = 9) -> np.ndarray:
    """GuideLLM-like sweep: synchronous rate, evenly spaced rates, throughput ceiling."""
    # One request at a time: B = 1, so L = C1 + C2 and the achieved rate is 1/L.
    synchronous = 1.0 / (c1 + c2)
    ceiling = 1.0 / c2
    return np.linspace(synchronous, ceiling, n_rates)


def generate_sweeps(truth: pd.DataFrame, *, n_rates: int = 9, n_requests: int = 600,
                    rate_error: float = 0.02, drift: float = 0.01,
                    seed: int | None = 0, effective_rate: bool = False) -> pd.DataFrame:
    """Sweeps for every row of ``truth`` (columns C1, C2 plus any design columns).

    With columns C1u, C1s, C2u, C2s (and experts_active, experts_total,
    tokens_per_request) the latency follows the MoE law, eq. (4), instead of eq. (1).
    Returns tidy rows (CONTRACT.md) with ``strategy`` and ``saturated`` set; the last
    rate of each sweep is the throughput run, at the ceiling, marked saturated.
    ``effective_rate``: also return the rate the law was evaluated at (``rps_effective``:
    the measured rate with its error), for generators that add more summaries of the
    same runs.
    """
    from bayesspec.laws import moe_latency

    rng = np.random.default_rng(seed)
    moe_columns = {"C1u", "C1s", "C2u", "C2s", "tokens_per_request", "bend"}
    design = [c for c in truth.columns if c not in {"C1", "C2"} | moe_columns]
    is_moe = {"C1u", "C1s", "C2u", "C2s"} <= set(truth.columns)
    rows = []
    for _, group in truth.iterrows():
        if is_moe:
            parts = [float(group[n]) for n in ("C1u", "C1s", "C2u", "C2s")]
            experts = (float(group["experts_active"]), float(group["experts_total"]),
                       float(group.get("tokens_per_request", 1.0)))
            c1, c2 = parts[0], parts[2] + parts[3]

            def law(rate, parts=parts, experts=experts):
                return float(moe_latency(rate, *parts, *experts))
        else:
            c1, c2 = float(group["C1"]), float(group["C2"])
            # A "bend" column: the second-order law (a sweep the law misfits).
            bend = float(group["bend"]) if "bend" in truth.columns else 0.0

            def law(rate, c1=c1, c2=c2, bend=bend):
                return c1 * (1 + bend * rate * c2) / (1 - rate * c2)
        rates = sweep_rates(c1, c2, n_rates)
        for i, rate in enumerate(rates):
            strategy = ("synchronous" if i == 0 else
                        "throughput" if i == len(rates) - 1 else "constant")
            if strategy == "throughput":
                achieved = rate * (1 - abs(rng.normal(0.0, 0.02)))
                effective = achieved
                utilisation = 0.999
                mean = c1 / (1 - utilisation) * np.exp(rng.normal(0.0, 0.3))
                cv = 2.0
            else:
                achieved = rate
                effective = rate * (1.0 + rng.normal(0.0, rate_error))
                utilisation = min(effective * c2, 0.995)
                # Per-request spread grows with the queue; the mean of n correlated
                # requests behaves like fewer independent ones near saturation.
                cv = 0.15 + 0.6 * utilisation
                effective_n = n_requests * (1 - utilisation)
                true_mean = law(min(effective, 0.995 / c2))
                sampling = rng.normal(0.0, cv / np.sqrt(max(effective_n, 4.0)))
                mean = true_mean * np.exp(sampling + rng.normal(0.0, drift))
            row = {name: group[name] for name in design}
            row.update({
                "rps": achieved,
                "rps_target": np.nan if strategy != "constant" else rate,
                "latency_mean_s": mean,
                "latency_std_s": cv * mean,
                "n_requests": n_requests,
                "strategy": strategy,
                "saturated": strategy == "throughput",
            })
            if effective_rate:
                row["rps_effective"] = effective
            rows.append(row)
    return pd.DataFrame(rows)


def generate_closed_loop_sweeps(truth: pd.DataFrame, levels=(1, 2, 4, 8, 16, 32), *,
                                n_requests: int = 600, cv: float = 0.15,
                                drift: float = 0.01, seed: int | None = 0) -> pd.DataFrame:
    """Closed-loop sweeps (``levels`` clients each, ``vllm bench serve --max-concurrency``)
    for every row of ``truth`` (columns C1, C2 plus any design columns): at N requests in
    flight eq. (1) reads L = C1 + C2 N; each point's mean latency is that times its
    sampling error over ``n_requests`` requests (per-request spread ``cv``) and a run's
    drift, and its rate follows from Little's law, N / L, as a closed loop's does. Rows
    carry ``max_concurrency`` and ``mean_concurrency`` (both N)."""
    rng = np.random.default_rng(seed)
    design = [c for c in truth.columns if c not in {"C1", "C2"}]
    rows = []
    for _, group in truth.iterrows():
        c1, c2 = float(group["C1"]), float(group["C2"])
        for level in levels:
            mean = (c1 + c2 * level) * np.exp(rng.normal(0.0, cv / np.sqrt(n_requests))
                                               + rng.normal(0.0, drift))
            row = {name: group[name] for name in design}
            row.update({"rps": level / mean, "latency_mean_s": mean,
                        "latency_std_s": cv * mean, "n_requests": n_requests,
                        "max_concurrency": int(level), "mean_concurrency": float(level),
                        "strategy": "synchronous" if level == 1 else "concurrent"})
            rows.append(row)
    return pd.DataFrame(rows)


def generate_shared_run_sweeps(truth: pd.DataFrame, *, n_rates: int = 9,
                               n_requests: int = 1000, latency_cv: float = 0.3,
                               share: float | None = None, top_utilisation: float = 0.9,
                               drift: float = 0.005, seed: int = 0,
                               common_share: float = 0.0,
                               own_length: float = 0.0) -> pd.DataFrame:
    """Sweeps that replay one arrival pattern at every rate (as Vidur and a fixed-seed
    GuideLLM sweep do), for each row of ``truth`` (columns C1, C2 plus design columns):
    ``n_rates`` rates evenly from 5% to ``top_utilisation`` of eq. (1)'s pole, each point's
    log mean the law's plus its sampling error as one run of ``n_requests`` correlated
    requests (:func:`bayesspec.laws.run_mean_log_sd`, cv ``latency_cv``, N = RPS x L),
    ``share`` of whose variance (default :data:`bayesspec.laws.RUN_EFFECT_SHARE`) is one
    draw per sweep, the rest the point's own, plus a drift of log-sd ``drift``. Of that
    draw's variance, ``common_share`` is one draw that every sweep shares (one seed
    serving them all). The sweep's draw (in units of a point's run sd) is in the column
    ``run_effect_true``. ``own_length`` > 0: the points' own parts are one
    Ornstein-Uhlenbeck process along the sweep's log RPS with that correlation length
    (:func:`bayesspec.laws.run_process_factor`), as neighbouring rates replaying one
    arrival pattern are; 0: independent."""
    from bayesspec.laws import RUN_EFFECT_SHARE, latency, run_mean_log_sd, run_process_factor

    share = RUN_EFFECT_SHARE if share is None else float(share)
    rng = np.random.default_rng([seed, 11])
    design = [c for c in truth.columns if c not in {"C1", "C2"}]
    common_share = min(float(common_share), share)
    common = np.sqrt(common_share) * rng.normal() if common_share > 0 else 0.0
    rows = []
    for _, group in truth.iterrows():
        c1, c2 = float(group["C1"]), float(group["C2"])
        effect = common + np.sqrt(share - common_share) * rng.normal()
        rates = np.linspace(0.05, top_utilisation, n_rates) / c2
        process = (run_process_factor(np.log(rates), np.zeros(n_rates, int), own_length)
                   @ rng.normal(size=n_rates) if own_length > 0 else None)
        for i, rate in enumerate(rates):
            mean = float(latency(rate, c1, c2))
            run_sd = float(run_mean_log_sd(latency_cv, n_requests, rate * mean))
            own = np.sqrt(1.0 - share) * (process[i] if process is not None
                                          else rng.normal())
            measured = mean * np.exp(run_sd * (effect + own) + rng.normal(0.0, drift))
            row = {name: group[name] for name in design}
            row.update({"rps": rate, "rps_target": rate, "latency_mean_s": measured,
                        "latency_std_s": latency_cv * measured, "n_requests": n_requests,
                        "strategy": "constant", "saturated": False,
                        "run_effect_true": effect})
            rows.append(row)
    return pd.DataFrame(rows)


def placeholder_truth() -> pd.DataFrame:
    """Known (C1, C2) for three dense verifiers x the paper's 16 (prefill, decode) pairs."""
    verifiers = {  # params (billions), KV bytes per token (bf16, from the model cards)
        "Qwen3-8B": (8.19, 2 * 36 * 8 * 128 * 2),
        "Qwen3-14B": (14.8, 2 * 40 * 8 * 128 * 2),
        "Qwen3-32B": (32.8, 2 * 64 * 8 * 128 * 2),
    }
    lengths = (256, 512, 768, 1024)
    rows = []
    for name, (params_b, kv_bytes) in verifiers.items():
        for prefill in lengths:
            for decode in lengths:
                c1, c2 = roofline_costs(params_b, prefill, decode, kv_bytes)
                rows.append({"verifier": name, "drafter": "", "k": 0,
                             "prefill_tokens": prefill, "decode_tokens": decode,
                             "gpu": "H100", "C1": c1, "C2": c2})
    return pd.DataFrame(rows)


# Six cycle coefficients with magnitudes from the public Llama-3.1-8B / H100 step fit
# (SpecDecode-Bench's, simulate.stepmodel.PUBLIC_FIT) at 512/512 tokens: c1v ~ one
# verifier step, c1d ~ one draft step, c2v ~ the marginal cost of a request in one
# verification (KV reads and k+1 tokens), c2d ~ a drafter step's marginal cost, c1p/c2p
# ~ prefill.
SPECULATIVE_TRUTH_8B = {"c1p": 0.011, "c1v": 7.1e-3, "c1d": 2.1e-3,
                        "c2p": 0.011, "c2v": 1.5e-4, "c2d": 4.0e-6}
DENSE_TRUTH_8B = {"C1": 3.65, "C2": 0.037}


def speculative_truth(coefficients: dict | None = None, dense: dict | None = None, *,
                      alphas=(0.5, 0.6, 0.7, 0.8, 0.9), ks=(1, 2, 4, 6, 8),
                      decode_tokens: int = 512, prefill_tokens: int = 512,
                      verifier: str = "Llama-3.1-8B",
                      drafter: str = "EAGLE3-LLaMA3.1-Instruct-8B") -> pd.DataFrame:
    """Per-configuration (C1, C2): the dense baseline plus every (alpha, k) via eq. (3)."""
    from bayesspec.laws import effective_costs

    coefficients = coefficients or SPECULATIVE_TRUTH_8B
    dense = dense or DENSE_TRUTH_8B
    base = {"verifier": verifier, "prefill_tokens": prefill_tokens,
            "decode_tokens": decode_tokens}
    rows = [{**base, "drafter": "", "k": 0, "alpha": np.nan, **dense}]
    for alpha in alphas:
        for k in ks:
            c1, c2 = effective_costs(alpha, k, decode_tokens, *(coefficients[n] for n in
                                     ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")))
            rows.append({**base, "drafter": drafter, "k": k, "alpha": alpha,
                         "C1": float(c1), "C2": float(c2)})
    return pd.DataFrame(rows)


def add_acceptance_counters(data: pd.DataFrame, *, drafts_per_row: int = 20000,
                            seed: int | None = 0, drop_alpha: bool = True) -> pd.DataFrame:
    """Add vLLM-like counters (num_drafts, draft_tokens, accepted_tokens) to SD rows.

    Acceptance is i.i.d. with the row's alpha: the number of drafts whose first i tokens
    were all accepted is a chain of binomial thinnings, and accepted tokens are their
    sum over positions. With ``drop_alpha`` the alpha column is blanked, as when alpha
    is only known through the counters.
    """
    rng = np.random.default_rng(seed)
    out = data.copy()
    drafts = np.zeros(len(out), dtype=np.int64)
    accepted = np.zeros(len(out), dtype=np.int64)
    for i, (k, alpha) in enumerate(zip(out["k"].to_numpy(int), out["alpha"].to_numpy(float))):
        if k <= 0:
            continue
        surviving = drafts_per_row
        total = 0
        for _ in range(k):
            surviving = rng.binomial(surviving, alpha)
            total += surviving
        drafts[i] = drafts_per_row
        accepted[i] = total
    is_sd = out["k"].to_numpy(int) > 0
    out["num_drafts"] = np.where(is_sd, drafts, 0)
    out["draft_tokens"] = np.where(is_sd, drafts * out["k"].to_numpy(int), 0)
    out["accepted_tokens"] = np.where(is_sd, accepted, 0)
    if drop_alpha:
        out["alpha_true"] = out["alpha"]
        out["alpha"] = np.nan
    return out


def add_position_counters(data: pd.DataFrame, *, drafts_per_row: int = 20000,
                          concentration: float | None = None, per_position: bool = True,
                          seed: int | None = 0, drop_alpha: bool = True,
                          decay: float = 0.0) -> pd.DataFrame:
    """Add vLLM-like counters, per position too, to SD rows, with optional overdispersion.

    Each row is a window of ``drafts_per_row`` drafts. With ``concentration`` kappa the
    window's position i gets its own rate a_i ~ Beta(alpha*kappa, (1-alpha)*kappa)
    (prompt-to-prompt variation; independent across positions, so the mean unconditional
    rate is still alpha^i); without it a_i = alpha. Drafts accepting their first i tokens
    are a chain of binomial thinnings with rates a_1..a_k. Writes num_drafts,
    draft_tokens, accepted_tokens and, with ``per_position``, ``accepted_tokens_posI``
    (I = 1..max k; 0 beyond a row's k, as vLLM has no series there).
    ``decay`` b: the conditional rate of position i is logit^-1(logit(alpha) + b log i)
    (acceptance that falls along the draft; 0: i.i.d.).
    """
    rng = np.random.default_rng(seed)
    out = data.copy()
    ks = out["k"].to_numpy(int)
    max_k = int(ks.max()) if len(out) else 0
    positions = np.zeros((len(out), max_k), dtype=np.int64)
    for row, (k, alpha) in enumerate(zip(ks, out["alpha"].to_numpy(float))):
        surviving = drafts_per_row
        for i in range(k):
            mean = 1.0 / (1.0 + np.exp(-(np.log(alpha / (1 - alpha)) + decay * np.log(i + 1))))
            rate = (mean if concentration is None else
                    rng.beta(mean * concentration, (1 - mean) * concentration))
            surviving = rng.binomial(surviving, rate)
            positions[row, i] = surviving
    is_sd = ks > 0
    out["num_drafts"] = np.where(is_sd, drafts_per_row, 0)
    out["draft_tokens"] = np.where(is_sd, drafts_per_row * ks, 0)
    out["accepted_tokens"] = positions.sum(axis=1)
    if per_position:
        for i in range(max_k):
            out[f"accepted_tokens_pos{i + 1}"] = positions[:, i]
    if drop_alpha:
        out["alpha_true"] = out["alpha"]
        out["alpha"] = np.nan
    return out


def hierarchical_truth(verifiers=("Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-8B", "Qwen3-14B",
                                  "Qwen3-32B", "Llama-3.1-8B", "Llama-3.1-70B"),
                       lengths=(256, 512, 768, 1024), *, gpu: str = "H100",
                       cell_sd: float = 0.01, c2p_verifier_sd: float = 0.0,
                       seed: int = 0) -> pd.DataFrame:
    """Dense configurations whose C1, C2 follow the hierarchical model's trends.

    Every (verifier, prefill, decode) cell gets eq. (3) at k = 0 from the roofline rates
    of :func:`bayesspec.laws.trends.physics_centres` (the truth), times a log-normal
    cell deviation of ``cell_sd``; each verifier's c2p strays from its trend by a
    log-normal factor of ``c2p_verifier_sd`` (the log deviations by verifier in
    ``attrs["c2p_verifier_deviation"]``). Feed it to :func:`generate_sweeps`.
    """
    from bayesspec.laws.trends import TERM_NAMES, covariates, physics_centres, trend_coefficients
    from bayesspec.data.catalog import default_catalog

    catalog = default_catalog()
    cards = [catalog.model(v) for v in verifiers]
    rates = physics_centres(catalog.gpu(gpu), cards)
    rate_vector = np.array([rates[n] for n in TERM_NAMES])
    rng = np.random.default_rng(seed)
    # Its own stream: the cells' draws stay those of a truth without verifier deviations.
    c2p_deviation = np.random.default_rng([seed, 1]).normal(0, c2p_verifier_sd, len(cards))
    rows = []
    for card, deviation in zip(cards, c2p_deviation):
        for prefill in lengths:
            for decode in lengths:
                values = trend_coefficients(rate_vector, covariates(
                    card.params_total_b, 0.0, float(prefill), float(decode)))
                c2p = values["c2p"] * np.exp(deviation)
                c1 = (values["c1p"] + decode * values["c1v"]) * np.exp(rng.normal(0, cell_sd))
                c2 = (c2p + decode * values["c2v"]) * np.exp(rng.normal(0, cell_sd))
                rows.append({"verifier": card.name, "k": 0, "prefill_tokens": prefill,
                             "decode_tokens": decode, "gpu": gpu,
                             "verifier_params_b": card.params_total_b, "C1": c1, "C2": c2})
    truth = pd.DataFrame(rows)
    truth.attrs["c2p_verifier_deviation"] = {card.name: float(d)
                                             for card, d in zip(cards, c2p_deviation)}
    return truth


#: Rates of the MoE low-load case (eq. (4)'s bend below 10% of the ceiling): fractions
#: of the saturation rate.
MOE_LOW_LOAD_FRACTIONS = np.linspace(0.03, 0.90, 9)


def moe_truth(pairs=((256, 256), (512, 512), (1024, 256), (256, 1024)), *,
              experts_active: int = 8, experts_total: int = 128,
              step_active_s: float = 0.006, step_all_experts_s: float = 0.016,
              per_token_s: float = 1.4e-5) -> pd.DataFrame:
    """Known eq. (4) costs of a Qwen3-30B-A3B-like sparse verifier (m = 8 of M = 128
    experts) on an H100 at a few (prefill, decode) pairs.

    A decode step costs ``step_active_s`` when few experts are touched and
    ``step_all_experts_s`` more when every expert's weights are streamed (the covered
    part C1s); each concurrent request adds its tokens' compute and KV reads (C2), about
    half of which is expert work that grows with coverage (C2s).
    """
    rows = []
    for prefill, decode in pairs:
        c1u = decode * step_active_s + prefill * 2e-5
        c1s = decode * step_all_experts_s
        c2 = (prefill + decode) * per_token_s + decode * 1.5e-5
        rows.append({"verifier": "Qwen3-30B-A3B", "drafter": "", "k": 0,
                     "prefill_tokens": prefill, "decode_tokens": decode, "gpu": "H100",
                     "experts_active": experts_active, "experts_total": experts_total,
                     "C1u": c1u, "C1s": c1s, "C2u": 0.5 * c2, "C2s": 0.5 * c2})
    return pd.DataFrame(rows)


def moe_true_latency(truth_row, rps) -> np.ndarray:
    """The exact eq. (4) mean latency (paper's T = RPS*L, one token per request and step)
    of one row of :func:`moe_truth` at rates ``rps``."""
    from bayesspec.laws import moe_latency

    return moe_latency(np.asarray(rps, float), *(float(truth_row[n]) for n in
                                                  ("C1u", "C1s", "C2u", "C2s")),
                       float(truth_row["experts_active"]), float(truth_row["experts_total"]),
                       1.0)


def generate_moe_sweeps(truth: pd.DataFrame, *, fractions=MOE_LOW_LOAD_FRACTIONS,
                        noise: float = 0.025, n_requests: int = 500,
                        seed: int | None = 0) -> pd.DataFrame:
    """Sweeps straight from eq. (4): per group, Poisson-like rates at ``fractions`` of
    the saturation rate 1/(C2u + C2s), mean latency the exact law times a log-normal
    error of sd ``noise`` plus the sampling error of a mean of ``n_requests`` requests,
    whose standard error is recorded (``latency_std_s``, ``n_requests``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _, group in truth.iterrows():
        ceiling = 1.0 / (float(group["C2u"]) + float(group["C2s"]))
        rates = np.asarray(fractions, float) * ceiling
        true = moe_true_latency(group, rates)
        for rate, mean in zip(rates, true):
            utilisation = rate / ceiling
            cv = 0.15 + 0.6 * utilisation
            se = cv / np.sqrt(n_requests)
            observed = mean * np.exp(rng.normal(0.0, noise) + rng.normal(0.0, se))
            rows.append({**{c: group[c] for c in ("verifier", "drafter", "k",
                                                  "prefill_tokens", "decode_tokens", "gpu",
                                                  "experts_active", "experts_total")},
                         "rps": rate, "latency_mean_s": observed,
                         "latency_std_s": cv * observed, "n_requests": n_requests,
                         "strategy": "poisson", "saturated": False})
    return pd.DataFrame(rows)


def tail_truth(truth: pd.DataFrame, metrics: dict[str, tuple[float, float]], *,
               spread: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """Known tail laws for every group of ``truth`` (one row per group, with C1, C2):
    for each metric ``(ratio, gamma)`` gives the zero-load value A = C1*ratio and the
    exponent of q = A (1 - RPS*C2)^(-gamma); each group's ratio and gamma scatter around
    them by a log-normal factor of log-sd ``spread``. Adds columns ``A_<metric>`` and
    ``gamma_<metric>``."""
    rng = np.random.default_rng(seed)
    out = truth.copy().reset_index(drop=True)
    for metric, (ratio, gamma) in metrics.items():
        out[f"A_{metric}"] = out["C1"] * ratio * np.exp(rng.normal(0, spread, len(out)))
        out[f"gamma_{metric}"] = gamma * np.exp(rng.normal(0, spread, len(out)))
    return out


def count_truth(truth: pd.DataFrame, metrics: dict[str, tuple[float, float]], *,
                spread: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """Known count laws (:func:`bayesspec.laws.count_spread_quantile_expr`) for every
    group of ``truth``: for each end-to-end percentile ``(zero_load_spread, dispersion)``,
    each group's pair scattered by a log-normal factor of log-sd ``spread``. Adds columns
    ``spread_<metric>`` and ``dispersion_<metric>`` (:func:`generate_tail_sweeps` reads
    them as it reads ``A_``/``gamma_``)."""
    rng = np.random.default_rng(seed)
    out = truth.copy().reset_index(drop=True)
    for metric, (zero_spread, dispersion) in metrics.items():
        out[f"spread_{metric}"] = zero_spread * np.exp(rng.normal(0, spread, len(out)))
        out[f"dispersion_{metric}"] = dispersion * np.exp(rng.normal(0, spread, len(out)))
    return out


def generate_tail_sweeps(truth: pd.DataFrame, *, noise: float = 0.03, n_rates: int = 9,
                         seed: int = 0, spread: float = 0.25, run_share: float | None = None,
                         count_dispersion: str = "chain", **options) -> pd.DataFrame:
    """Sweeps of :func:`generate_sweeps` for each row of a :func:`tail_truth` table, with
    each metric's column (``latency_p99_s``, ``ttft_p99_s``, ...) as a load test of the
    row's ``n_requests`` requests reports it: the law's value q at the run's effective
    rate (the one its mean latency felt), then the sample percentile of that many
    requests, per-request latencies log-normal of log-sd ``spread`` around q (an order
    statistic: log q + spread (Phi^-1(U) - z_p), U ~ Beta(r, n + 1 - r)), times a
    log-normal error of log-sd ``noise`` (what a law leaves over). Points at or past
    saturation get the law at 99.5% utilisation (they are marked saturated and set aside
    by the models).

    ``run_share``: the run's requests are correlated instead (the tails model's
    ``summary_run``). A summary keeps the order statistic's bias, and its scatter is
    normal with 1 + 2N times the order statistic's variance (N = RPS x the point's mean
    latency), ``run_share`` of it one draw for the whole file, the rest the point's own.

    ``count_dispersion``: the count law's variance, "chain"
    (:func:`bayesspec.laws.count_spread_quantile_expr`) or "batch"
    (:func:`bayesspec.laws.batch_count_quantile_expr`: here, with no cap, the Poisson
    count of stalls alone)."""
    from scipy.special import ndtri

    if count_dispersion not in ("chain", "batch"):
        raise ValueError(f"count_dispersion must be 'chain' or 'batch', got "
                         f"{count_dispersion!r}")
    from bayesspec.laws import (batch_count_quantile_expr, count_spread_quantile_expr,
                       load_factor_expr, percentile_latency_expr, quantile_rank,
                       quantile_sampling_moments)
    from bayesspec.data.schema import METRIC_COLUMNS, metric_quantile

    rng = np.random.default_rng([seed, 7])
    run_rng = np.random.default_rng([seed, 8])  # apart: the default stream is unchanged
    file_run = run_rng.normal()  # the file's arrival luck (``run_share``)
    power = [c[len("A_"):] for c in truth.columns if c.startswith("A_")]
    counted = [c[len("dispersion_"):] for c in truth.columns if c.startswith("dispersion_")]
    metrics = power + counted
    law_columns = ({f"A_{m}" for m in power} | {f"gamma_{m}" for m in power}
                   | {f"spread_{m}" for m in counted} | {f"dispersion_{m}" for m in counted})
    frames = []
    for i in range(len(truth)):
        row = truth.iloc[[i]]
        sweep = generate_sweeps(row.drop(columns=list(law_columns)), n_rates=n_rates,
                                seed=seed * 1000 + i, effective_rate=True, **options)
        # The same run as the mean: the summaries feel the same effective load.
        utilisation = np.minimum(sweep.pop("rps_effective").to_numpy(float)
                                 * float(row["C2"].iloc[0]), 0.995)
        count = sweep["n_requests"].to_numpy(float)
        for metric in metrics:
            quantile = metric_quantile(metric)
            if metric in counted:
                c1 = float(row["C1"].iloc[0])
                mean = c1 * load_factor_expr(utilisation, 1.0)
                arguments = (mean, c1, float(row["C2"].iloc[0]),
                             float(row[f"spread_{metric}"].iloc[0]),
                             float(row[f"dispersion_{metric}"].iloc[0]),
                             float(ndtri(quantile)))
                if count_dispersion == "chain":
                    value = count_spread_quantile_expr(*arguments)
                else:   # no cap here: all of the load is stalls, no slot wait
                    value = batch_count_quantile_expr(*arguments, mean - c1, 0.0)
            else:
                value = percentile_latency_expr(load_factor_expr(utilisation, 1.0),
                                                float(row[f"A_{metric}"].iloc[0]),
                                                float(row[f"gamma_{metric}"].iloc[0]))
            if np.isfinite(quantile) and run_share is not None:
                shift, variance = quantile_sampling_moments(quantile, count)
                in_flight = sweep["rps"].to_numpy(float) * sweep["latency_mean_s"].to_numpy(float)
                run_sd = spread * np.sqrt(variance * (1.0 + 2.0 * in_flight))
                value = value * np.exp(spread * shift + run_sd * (
                    np.sqrt(run_share) * file_run
                    + np.sqrt(1.0 - run_share) * run_rng.normal(size=len(sweep))))
            elif np.isfinite(quantile):
                rank = quantile_rank(quantile, count)
                order = rng.beta(rank, count + 1.0 - rank)
                value = value * np.exp(spread * (ndtri(order) - ndtri(quantile)))
            sweep[METRIC_COLUMNS[metric]] = value * np.exp(rng.normal(0, noise, len(sweep)))
        frames.append(sweep)
    return pd.concat(frames, ignore_index=True)


def token_process_counters(stay_guessable: float, stay_unguessable: float, ks, *,
                           drafts_per_window: int = 20000, windows_per_k: int = 1,
                           requests: int = 40, seed: int | None = 0,
                           verifier: str = "Llama-3.1-8B", drafter: str = "EAGLE3",
                           **labels) -> pd.DataFrame:
    """Counter windows (docs/CONTRACT.md: k, num_drafts, accepted_tokens_pos1..k)
    from the simulator's token process itself (:class:`bayesspec.simulate.spec.TokenProcess`,
    a token-by-token walk, not the law the acceptance model fits): each window walks
    ``requests`` requests long enough for ``drafts_per_window`` cycles in all."""
    from bayesspec.simulate.spec import TokenProcess

    process = TokenProcess(float(stay_guessable), float(stay_unguessable))
    rng = np.random.default_rng(seed)
    rows = []
    for k in ks:
        for _ in range(windows_per_k):
            per_request = int(np.ceil(drafts_per_window / requests))
            accepted = process.cycles(rng, np.full(requests, per_request), int(k))
            accepted = accepted[:drafts_per_window]
            row = {"verifier": verifier, "drafter": drafter, **labels, "k": int(k),
                   "num_drafts": int(len(accepted))}
            for i in range(1, int(k) + 1):
                row[f"accepted_tokens_pos{i}"] = int((accepted >= i).sum())
            rows.append(row)
    return pd.DataFrame(rows)
