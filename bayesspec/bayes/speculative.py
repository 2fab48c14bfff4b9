"""Speculation-aware latency model: six cycle coefficients shared by every (alpha, k).

Groups, as in the dense model, are configurations (verifier, drafter, k, alpha, prefill,
decode, ...) and get ``C1``/``C2`` (dim ``group``). A *setup* is a configuration without
k and alpha: (verifier, drafter, prefill, decode, ...). Per setup:

- dense rows (k = 0) have their own ``C1_dense``, ``C2_dense`` (parameterised exactly as
  in the dense model);
- every SD configuration j shares six positive coefficients through eq. (3):
  ``C1_j = c1p + (g/E_j)(c1v + k_j c1d)``, ``C2_j = c2p + (g/E_j)(c2v + k_j c2d)``,
  with ``E_j = expected_accepted(alpha_j, k_j)`` from :mod:`bayesspec.laws`.

Saturation by construction, as in the dense model: the C2 coefficients are written as a
direction times a scale, ``c2 = (e^rp, 1, e^rd) * u / M``, where M is the largest
``rps_max_j * C2_j`` of the setup's SD configurations at the unscaled direction. C2_j is
linear in the coefficients, so the largest utilisation reached in the data is exactly
``u`` in (0, 1), and no draw puts an observed point past saturation. The C1 side uses the
same split (shares and an overall scale) because the overall scale is what the data pin
down hardest; separating it from the shares gives the sampler round posteriors.

Acceptance: alpha is known where the data give it. Where a configuration has
acceptance counters and no alpha, or when ``latent_alpha="always"``, alpha is a latent
variable (``alpha_latent``, dim ``latent_alpha_group``) and its uncertainty flows into
every decision. alpha stays the i.i.d. per-position acceptance probability of eq. (3):
a draft accepts its first i tokens with probability alpha^i. Every row with counters is
a window of N drafts (the counters of rows excluded from the latency likelihood count
too: acceptance does not depend on load). Prompt-to-prompt variation makes windows
scatter more than Binomial counts would: within a window each position gets its own
rate a_i ~ Beta(alpha*kappa, (1-alpha)*kappa), independent across positions, so that
E[P(accept i)] = alpha^i exactly and eq. (3) stays consistent; the concentration kappa
is learned per group (``acceptance_dispersion="none"``: a_i = alpha, plain Binomial
counts).

- Per-position counters (``accepted_tokens_pos1..k``, vLLM's
  ``spec_decode_num_accepted_tokens_per_pos``: drafts whose first i tokens were accepted)
  give an exact likelihood: n_i | n_(i-1) ~ BetaBinomial(n_(i-1), alpha*kappa,
  (1-alpha)*kappa), n_0 = N. Acceptance that decays with the position is not modelled
  (eq. (3) has one alpha).
- Totals only (``accepted_tokens`` with ``num_drafts`` or ``draft_tokens``): accepted
  vs drafted tokens, A ~ BetaBinomial(k*N, ...). accepted/drafted is *not* alpha: its
  mean is rho = sum_{i<=k} alpha^i / k = (expected_accepted(alpha, k) - 1)/k, and a
  draft's tokens are not independent trials (acceptance stops at the first rejection),
  so the Beta-Binomial is the one matching the mean and variance of the generative
  model above (:func:`acceptance_total_moments`); with k = 1 it is the exact one.

``acceptance="auto"`` uses the per-position counts of a window when all k are there and
the totals otherwise; ``"totals"`` ignores per-position counts; ``"per_position"`` needs
them for every counted window of a latent group.

Kept whole: one model class with the likelihood blocks only it uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bayesspec.bayes.lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from bayesspec.data import EXTRA_GROUP_COLUMNS, group_label, row_group_labels
from bayesspec.errors import BadInput
from bayesspec.laws import costs_for_acceptance_length, expected_accepted, expected_accepted_expr
from bayesspec.prediction import CoefficientLaw, Curve, MeasuredConfiguration, MoECurve, MoESplit
from bayesspec.bayes import moe_split
from bayesspec.bayes.acceptance import TOKEN_VARIABLES
from bayesspec.bayes.base import COMMON_CONFIG, LatencyModel, ModelInputs, dense_hint
from bayesspec.bayes.caps import engine_limits, fitted_cap
from bayesspec.bayes.priors import latency_likelihood, pooled_normal
from bayesspec.bayes.options import model_defaults

SETUP_COLUMNS = ("verifier", "drafter", "prefill_tokens", "decode_tokens")
COEFFICIENTS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")


def setup_columns(groups: pd.DataFrame) -> list[str]:
    return [c for c in SETUP_COLUMNS if c in groups.columns] + \
        [c for c in EXTRA_GROUP_COLUMNS if c in groups.columns]


def _setup_label(row: dict, columns: list[str]) -> str:
    plain = dict(row)
    plain["k"] = 0
    plain["drafter"] = ""
    label = group_label(plain, columns)
    return f"{label} +{row['drafter']}" if row.get("drafter") else label


POSITION_COLUMN = "accepted_tokens_pos{}"   # drafts whose first i tokens were accepted
# A Beta-Binomial concentration this large is a Binomial for any realistic count; capping
# it keeps log-gamma differences accurate to about 1e-6.
MAX_CONCENTRATION = 1e8


def _counter_totals(rows: pd.DataFrame, group_index: np.ndarray, n_groups: int) -> dict:
    """Acceptance counters of every row (one *window* of drafts) and their group totals.

    Returns per row: ``drafts`` (num_drafts, or draft_tokens/k), ``accepted`` (the
    accepted-token total, or the sum of the per-position counts), ``positions`` (rows x
    max k: drafts with their first i tokens accepted, vLLM's per-position counter; NaN
    where absent, 0 beyond the row's k) and ``valid``; per group the sums
    ``drafts_total`` and ``accepted_total`` (NaN for groups without counters).
    Rows of no fitted group have ``group_index`` -1.
    """
    n = len(rows)
    source = rows.attrs.get("source_file")

    def column(name):
        if name not in rows.columns:
            return np.full(n, np.nan)
        return pd.to_numeric(rows[name], errors="coerce").to_numpy(float)

    k = rows["k"].to_numpy(float)
    drafts = column("num_drafts")
    with np.errstate(invalid="ignore", divide="ignore"):
        drafts = np.where(np.isnan(drafts),
                          np.round(column("draft_tokens") / np.where(k > 0, k, np.nan)), drafts)
    max_k = int(k.max()) if n else 0
    positions = np.stack([column(POSITION_COLUMN.format(i)) for i in range(1, max_k + 1)],
                         axis=1) if max_k else np.zeros((n, 0))
    positions = np.where(np.arange(1, max_k + 1)[None, :] > k[:, None], 0.0, positions)
    complete = (k > 0) & np.isfinite(positions).all(axis=1)
    accepted = column("accepted_tokens")
    accepted = np.where(np.isnan(accepted) & complete, positions.sum(axis=1), accepted)
    empty = (group_index >= 0) & (k > 0) & (drafts == 0)
    if empty.any():
        raise BadInput("a window with no drafts measures no acceptance: drop the counters "
                       "of this row or give them", file=source,
                       row=int(np.flatnonzero(empty)[0]) + 1, column="num_drafts")
    drafted = column("draft_tokens")
    above = (group_index >= 0) & np.isfinite(drafted) & np.isfinite(accepted) & (accepted > drafted)
    if above.any():
        raise BadInput("more accepted tokens than drafted (draft_tokens)", file=source,
                       row=int(np.flatnonzero(above)[0]) + 1, column="accepted_tokens")
    valid = ((group_index >= 0) & (k > 0) & np.isfinite(drafts) & (drafts > 0)
             & np.isfinite(accepted))
    too_many = valid & (accepted > k * drafts)
    if too_many.any():
        raise BadInput("more accepted tokens than drafted (k x num_drafts)", file=source,
                       row=int(np.flatnonzero(too_many)[0]) + 1, column="accepted_tokens")
    # The chain of conditional counts needs n_i <= n_(i-1) <= ... <= num_drafts.
    chain = np.concatenate([drafts[:, None], positions], axis=1)
    rising = valid & complete & (np.diff(chain, axis=1) > 0).any(axis=1)
    if rising.any():
        row = int(np.flatnonzero(rising)[0])
        i = int(np.flatnonzero(np.diff(chain[row]) > 0)[0]) + 1
        raise BadInput("per-position accepted counts must not increase with the position "
                       "(position i counts the drafts whose first i tokens were accepted) "
                       "nor exceed num_drafts", file=source, row=row + 1,
                       column=POSITION_COLUMN.format(i))
    drafts_total = np.full(n_groups, np.nan)
    accepted_total = np.full(n_groups, np.nan)
    for g in range(n_groups):
        members = valid & (group_index == g)
        if members.any():
            drafts_total[g] = drafts[members].sum()
            accepted_total[g] = accepted[members].sum()
    # a reported acceptance length without counts (a run's summary, a published table)
    length = column("acceptance_length")
    reported = (group_index >= 0) & (k > 0) & ~valid & np.isfinite(length)
    return {"drafts": drafts, "accepted": accepted, "positions": positions, "k": k,
            "complete": complete & valid, "valid": valid, "length": length,
            "reported": reported,
            "drafts_total": drafts_total, "accepted_total": accepted_total}


def acceptance_total_moments(alpha, k, drafts, concentration=None, *, max_k: int, xp=np):
    """Mean and variance of the accepted tokens of a window of ``drafts`` drafts.

    Generative model: within a window every position i has its own acceptance rate
    a_i ~ Beta(alpha*kappa, (1-alpha)*kappa), independent across positions and windows
    (``concentration`` kappa; None: a_i = alpha), and each draft accepts its first i
    tokens with probability prod_{j<=i} a_j. Because the a_i are independent,
    P(A >= i) = alpha^i on average: eq. (3)'s expected_accepted holds exactly.
    Per draft E[A] = sum_{i<=k} alpha^i and E[A^2] = sum (2i-1) alpha^i; over a window,
    Var = N (E[A^2] - Q) + N^2 (Q - E[A]^2) with Q = E[(sum_i q_i)^2] =
    sum_{i,l} E[a^2]^min(i,l) alpha^|i-l| and E[a^2] = alpha^2 + alpha(1-alpha)/(kappa+1).
    ``xp``: numpy or pytensor.tensor; ``alpha``, ``k``, ``drafts``, ``concentration``
    are 1-d over windows.
    """
    i = np.arange(1, max_k + 1, dtype=float)
    a = alpha[:, None]
    used = xp.where(i[None, :] <= k[:, None], 1.0, 0.0)
    powers = a ** i[None, :] * used
    mean_one = expected_accepted_expr(alpha, k, xp=xp) - 1.0
    second_one = xp.sum((2.0 * i - 1.0)[None, :] * powers, axis=1)
    if concentration is None:
        cross = mean_one ** 2
        between = 0.0
    else:
        low = np.minimum.outer(i, i)[None, :, :]
        gap = np.abs(np.subtract.outer(i, i))[None, :, :]
        square = alpha ** 2 + alpha * (1.0 - alpha) / (concentration + 1.0)
        pair = used[:, :, None] * used[:, None, :] * a[:, :, None] ** gap
        cross = xp.sum(xp.sum(pair * square[:, None, None] ** low, axis=2), axis=1)
        between = xp.sum(xp.sum(pair * (square[:, None, None] ** low
                                        - a[:, :, None] ** (2.0 * low)), axis=2), axis=1)
    within = second_one - cross
    return drafts * mean_one, drafts * within + drafts ** 2 * between


def matched_beta_binomial(mean, variance, trials, xp=np):
    """Beta-Binomial (a, b) over ``trials`` with the given mean and variance.

    Var = n p (1-p) (n + c)/(1 + c) with c = a + b; solved for c and capped, so that a
    variance at or below the Binomial's gives (nearly) the Binomial.
    """
    rate = mean / trials
    excess = variance / (trials * rate * (1.0 - rate)) - 1.0
    excess = xp.maximum(excess, (trials - 1.0) / (MAX_CONCENTRATION + 1.0))
    concentration = xp.clip((trials - 1.0 - excess) / excess, 1e-2, MAX_CONCENTRATION)
    return rate * concentration, (1.0 - rate) * concentration


def acceptance_likelihood(alpha, data: dict, cfg: dict, *, max_k: int):
    """Add the counter likelihood of latent ``alpha`` (dim ``latent_alpha_group``).

    ``data`` holds the ``pm.Data`` of :meth:`SpeculativeLatencyModel.data_arrays` whose
    names start with ``acceptance_``: per-position windows (conditional counts, exact
    Beta-Binomial chain) and totals-only windows (accepted vs drafted tokens, a
    Beta-Binomial matched to the two moments of :func:`acceptance_total_moments`).
    """
    concentration = None
    if cfg["acceptance_dispersion"] == "learned":
        # One concentration per group with its own prior: the counters of a group (9
        # windows x k positions) pin it down well, and a pooled (non-centred) version
        # diverged where the spread between groups is large.
        log_concentration = pm.Normal("acceptance_log_concentration",
                                      cfg["acceptance_log_concentration_mean"],
                                      cfg["acceptance_log_concentration_scale"],
                                      dims="latent_alpha_group")
        concentration = pm.Deterministic("acceptance_concentration",
                                         pt.exp(log_concentration), dims="latent_alpha_group")
    if "acceptance_position_group" in data:
        group = data["acceptance_position_group"]
        rate = alpha[group][:, None]
        dims = ("acceptance_position_window", "acceptance_position")
        if concentration is None:
            pm.Binomial("acceptance_position_count", n=data["acceptance_position_trials"],
                        p=rate, observed=data["acceptance_position_accepted"], dims=dims)
        else:
            kappa = concentration[group][:, None]
            pm.BetaBinomial("acceptance_position_count", n=data["acceptance_position_trials"],
                            alpha=rate * kappa, beta=(1.0 - rate) * kappa,
                            observed=data["acceptance_position_accepted"], dims=dims)
    if "acceptance_totals_group" in data:
        group = data["acceptance_totals_group"]
        k = data["acceptance_totals_k"]
        drafts = data["acceptance_totals_drafts"]
        mean, variance = acceptance_total_moments(
            alpha[group], k, drafts, None if concentration is None else concentration[group],
            max_k=max_k, xp=pt)
        trials = k * drafts
        a, b = matched_beta_binomial(mean, variance, trials, xp=pt)
        pm.BetaBinomial("acceptance_accepted_tokens", n=trials, alpha=a, beta=b,
                        observed=data["acceptance_totals_accepted"],
                        dims="acceptance_totals_window")


def median_cycle_anchors(groups: pd.DataFrame, sd_idx: np.ndarray, decode: np.ndarray,
                         k: np.ndarray, member_sets: list[np.ndarray]) -> np.ndarray:
    """Per set of SD configurations (positions in ``sd_idx``), the member with the median
    number of cycles g/E (alpha guessed at 0.7 where latent): the anchor configuration."""
    guess_alpha = groups["alpha"].to_numpy(float)[sd_idx]
    guess_cycles = decode / expected_accepted(
        np.where(np.isnan(guess_alpha), 0.7, guess_alpha), k)
    anchors = np.zeros(len(member_sets), dtype=int)
    for i, members in enumerate(member_sets):
        order = members[np.argsort(guess_cycles[members], kind="stable")]
        anchors[i] = order[(len(order) - 1) // 2]
    return anchors


def curve_utilisation(cfg: dict):
    """logit of the utilisation reached by each curve's highest rate (not pooled: it is
    a property of the test design, see bayesspec.bayes.dense)."""
    return pm.Normal("utilisation_logit", cfg["utilisation_logit_mean"],
                     cfg["utilisation_logit_scale"], dims="curve")


class SpeculativeLatencyModel(LatencyModel):
    name = "speculative"
    # 2: latent alpha from a Beta-Binomial on the counters (1: a normal approximation)
    version = "3"
    # Measured when the model was written (2026-11-30): at 0.9 about one fit in three had
    # one or two divergences near the top utilisation; at 0.95 none in the replicate runs,
    # nor in the 20 speculative fits of docs/findings/sampler-geometry.md, "Noise priors
    # that keep a fit off the noise-free neck".
    target_accept = 0.95
    default_config = model_defaults("speculative", COMMON_CONFIG)

    # ------------------------------------------------------------------ inputs
    def prepare(self, data: pd.DataFrame) -> ModelInputs:
        source = data.attrs.get("source_file")
        inputs = super().prepare(data)
        groups = inputs.groups

        columns = setup_columns(groups)
        records = groups.to_dict("records")
        # A baseline (verifier, lengths, ...) holds the dense costs; a setup (a baseline
        # with one drafter) holds the six cycle coefficients of that drafter.
        # The drafting method belongs to the drafter, not to the baseline.
        groups["baseline"] = [_setup_label({**r, "drafter": "", "method": ""}, columns)
                              for r in records]
        groups["setup"] = [_setup_label(r, columns) for r in records]
        is_sd = groups["k"].to_numpy(int) > 0
        groups["is_sd"] = is_sd
        setups = groups.loc[is_sd].drop_duplicates("setup")
        setups = setups[["setup", "baseline"] + columns].reset_index(drop=True)
        setup_number = {s: i for i, s in enumerate(setups["setup"])}
        groups["setup_index"] = [setup_number.get(s, -1) if sd else -1
                                 for s, sd in zip(groups["setup"], is_sd)]
        dense_of_baseline = {b: g for g, (b, sd) in enumerate(zip(groups["baseline"], is_sd))
                             if not sd}
        setups["dense_group"] = [dense_of_baseline.get(b, -1) for b in setups["baseline"]]

        if is_sd.any():
            decode = groups.loc[is_sd, "decode_tokens"]
            if decode.isna().any():
                label = groups.loc[is_sd & groups["decode_tokens"].isna(), "label"].iloc[0]
                raise BadInput(f"speculative rows need decode_tokens (group '{label}')",
                               file=source, column="decode_tokens")

        mode = self.config["latent_alpha"]
        # Counters of every row of a fitted group, saturated ones included.
        number = {label: g for g, label in enumerate(groups["label"])}
        counter_group = np.array([number.get(label, -1)
                                  for label in row_group_labels(data, groups)], dtype=int)
        counters = _counter_totals(data.reset_index(drop=True), counter_group, len(groups))
        drafts, accepted = counters["drafts_total"], counters["accepted_total"]
        has_counters = np.isfinite(drafts) & np.isfinite(accepted)
        alpha = groups["alpha"].to_numpy(float)
        if mode == "never":
            latent = np.zeros(len(groups), dtype=bool)
        elif mode == "always":
            latent = is_sd & has_counters
        else:
            latent = is_sd & has_counters & np.isnan(alpha)
        token = self.resolve_acceptance_law(groups, counters, counter_group) == "token"
        if token:
            latent = np.zeros(len(groups), dtype=bool)   # alpha is a label, E(k) is fitted
        missing = is_sd & np.isnan(alpha) & ~latent & (not token)
        if missing.any():
            label = groups.loc[missing, "label"].iloc[0]
            raise BadInput(f"alpha is unknown for speculative group '{label}' and there are "
                           "no acceptance counters (accepted_tokens with num_drafts or "
                           "draft_tokens) to estimate it", file=source, column="alpha")
        groups["alpha_latent"] = latent
        if mode == "auto" and (is_sd & has_counters).any() and not token:
            self.resolve_auto("latent_alpha", "always" if latent[is_sd].all() else
                              "never" if not latent.any() else "some",
                              f"alpha learned from the counters in {int(latent.sum())} of "
                              f"{int(is_sd.sum())} speculative groups (those without alpha)")
        groups["num_drafts_total"] = drafts
        groups["accepted_total"] = accepted
        inputs.extras["acceptance"], groups["acceptance_counts"] = self._acceptance_windows(
            counters, counter_group, latent, groups, source)
        if token:
            from bayesspec.bayes.acceptance import token_windows_of

            windows = token_windows_of(groups, counters, counter_group, len(setups), source)
            inputs.extras["acceptance_token"] = windows
            groups["acceptance_counts"] = np.where(is_sd, "token", "")

        moe_split.annotate(inputs, setups, self.config, source)
        sparse = int(groups["moe_split"].sum())
        if self.config["moe_split"] == "auto" and sparse:
            self.resolve_auto("moe_split", "auto", f"eq. (4) in the {sparse} group(s) of "
                              "sparse verifiers (expert counts known)")
        self.setups = setups
        inputs.extras["setups"] = setups
        return inputs

    def _acceptance_windows(self, counters, counter_group, latent, groups, source):
        """The counter windows of latent groups as ``pm.Data`` arrays, and per group which
        counts were used ("per_position", "totals", both joined by "+", or "")."""
        latent_number = np.cumsum(latent) - 1
        window = counters["valid"] & (counter_group >= 0)
        window &= latent[np.maximum(counter_group, 0)]
        usage = self.config["acceptance"]
        by_position = window & counters["complete"] & (usage != "totals")
        if usage == "per_position" and (window & ~by_position).any():
            row = int(np.flatnonzero(window & ~by_position)[0])
            raise BadInput("acceptance='per_position' needs accepted_tokens_pos1..k on every "
                           "counted row of a group with latent alpha", file=source,
                           row=row + 1, column=POSITION_COLUMN.format(1))
        by_total = window & ~by_position
        arrays = {}
        if by_position.any():
            k_max = int(counters["k"][by_position].max())
            counts = np.round(counters["positions"][by_position, :k_max]).astype(np.int64)
            trials = np.concatenate([np.round(counters["drafts"][by_position])[:, None]
                                     .astype(np.int64), counts[:, :-1]], axis=1)
            # no trials beyond a window's own k (its padded counts are 0)
            beyond = np.arange(1, k_max + 1)[None, :] > counters["k"][by_position, None]
            trials = np.where(beyond, 0, trials)
            arrays["acceptance_position_group"] = (
                latent_number[counter_group[by_position]], "acceptance_position_window")
            dims = ("acceptance_position_window", "acceptance_position")
            arrays["acceptance_position_trials"] = (trials, dims)
            arrays["acceptance_position_accepted"] = (counts, dims)
        if by_total.any():
            dim = "acceptance_totals_window"
            arrays["acceptance_totals_group"] = (latent_number[counter_group[by_total]], dim)
            arrays["acceptance_totals_k"] = (counters["k"][by_total].astype(np.int64), dim)
            arrays["acceptance_totals_drafts"] = (
                np.round(counters["drafts"][by_total]).astype(np.int64), dim)
            arrays["acceptance_totals_accepted"] = (
                np.round(counters["accepted"][by_total]).astype(np.int64), dim)
        used = []
        for g in range(len(groups)):
            kinds = [name for name, mask in (("per_position", by_position),
                                             ("totals", by_total))
                     if (mask & (counter_group == g)).any()]
            used.append("+".join(kinds))
        return arrays, used

    def data_arrays(self, inputs: ModelInputs) -> dict:
        """The base arrays plus the acceptance-counter windows (so compiled refits on new
        data see new counters too)."""
        arrays = super().data_arrays(inputs)
        arrays.update(inputs.extras.get("acceptance", {}))
        if "acceptance_token" in inputs.extras:
            windows = inputs.extras["acceptance_token"]
            arrays["acceptance_token_counts"] = (windows["counts"], None)
            if not windows["has_positions"].all():
                for name in ("accepted_mean", "inv_drafts", "resolution"):
                    arrays[f"acceptance_token_{name}"] = (windows[name], None)
        return arrays

    # ------------------------------------------------------------------ graph
    def build(self, data: pd.DataFrame) -> pm.Model:
        inputs = self.prepare(data)
        cfg = self.config
        groups = inputs.groups
        setups = inputs.extras["setups"]
        n_groups, n_setups = len(groups), len(setups)
        is_sd = groups["is_sd"].to_numpy(bool)
        sd_idx = np.flatnonzero(is_sd)
        dense_idx = np.flatnonzero(~is_sd)
        setup_index = groups["setup_index"].to_numpy(int)
        latent = groups["alpha_latent"].to_numpy(bool)
        latent_idx = np.flatnonzero(latent)

        coords = {"group": groups["label"].tolist(), "setup": setups["setup"].tolist(),
                  "point": np.arange(len(inputs.rows)),
                  # dense groups first, then SD setups: each has one utilisation
                  "curve": groups["label"].iloc[dense_idx].tolist() + setups["setup"].tolist()}
        if len(sd_idx):
            coords["sd_group"] = groups["label"].iloc[sd_idx].tolist()
        if len(dense_idx):
            coords["dense_group"] = groups["label"].iloc[dense_idx].tolist()
        if len(latent_idx):
            coords["latent_alpha_group"] = groups["label"].iloc[latent_idx].tolist()

        decode = groups["decode_tokens"].astype("Float64").to_numpy(float, na_value=np.nan)
        k = groups["k"].to_numpy(float)
        known_alpha = np.where(np.isnan(groups["alpha"].to_numpy(float)), 0.5,
                               groups["alpha"].to_numpy(float))

        with pm.Model(coords=coords) as model:
            data = self.add_data(inputs)
            rps_max = data["rps_max"]

            c1 = pt.zeros(n_groups)
            c2 = pt.zeros(n_groups)

            utilisation_logit = curve_utilisation(cfg)
            if len(dense_idx):
                c1, c2 = self._dense_part(cfg, groups, dense_idx, n_setups, rps_max,
                                          utilisation_logit[:len(dense_idx)], c1, c2)
            if len(sd_idx):
                alpha = self._alpha(groups, latent_idx, known_alpha)
                lengths = self._token_lengths(groups) if self._token_law() else None
                c1, c2 = self._speculative_part(cfg, groups, sd_idx, setup_index, n_setups,
                                                decode, k, alpha, rps_max,
                                                utilisation_logit[len(dense_idx):], c1, c2,
                                                lengths=lengths)

            self.likelihood(c1, c2, cfg, data, inputs)
        return model

    def likelihood(self, c1, c2, cfg, data, inputs, c1_log_shift=None, c2_log_shift=None,
                   shift_points=None):
        """The latency likelihood given per-group costs (a hook: an MoE verifier
        replaces eq. (1) by the covered/saturated split of eq. (4)).
        ``c1_log_shift``, ``c2_log_shift``, ``shift_points``: see
        :func:`priors.latency_likelihood` (eq. (1) only)."""
        if moe_split.uses_split(inputs):
            return moe_split.split_likelihood(c1, c2, cfg, data, inputs)
        if "has_roof" in data and c1_log_shift is None and c2_log_shift is None:
            from bayesspec.bayes.profile_inputs import roof_mean_law

            mean, felt = roof_mean_law(c1, c2, data, cycles=self._roof_cycles(inputs))
            return latency_likelihood(c1, c2, cfg, data, mean_latency=mean, c2_point=felt)
        return latency_likelihood(c1, c2, cfg, data, c1_log_shift=c1_log_shift,
                                  c2_log_shift=c2_log_shift, shift_points=shift_points)

    def _roof_cycles(self, inputs):
        """Per group, a request's engine steps: its decode length over E(k) (the graph's,
        where acceptance is latent or a token process), the decode length for plain
        decoding."""
        groups = inputs.groups
        decode = groups["decode_tokens"].astype("Float64").to_numpy(float, na_value=1.0)
        cycles = pt.as_tensor_variable(decode)
        lengths = getattr(self, "_roof_lengths", None)
        if lengths is None:
            return cycles
        sd_idx, length_sd = lengths
        return pt.set_subtensor(cycles[sd_idx], decode[sd_idx] / length_sd)

    def _dense_part(self, cfg, groups, dense_idx, n_setups, rps_max, utilisation_logit, c1, c2):
        center = float(np.log(np.median(groups["latency_low"].to_numpy()[dense_idx])))
        log_c1 = pooled_normal("log_C1_dense", center, cfg["log_c1_scale"], "dense_group",
                               len(dense_idx), centred=True)
        utilisation = pm.math.sigmoid(utilisation_logit)
        dense_c1 = pt.exp(log_c1)
        dense_c2 = utilisation / rps_max[dense_idx]
        if n_setups:
            # The dense baseline of each SD setup (NaN where the data have none).
            dense_group = self.inputs.extras["setups"]["dense_group"].to_numpy(int)
            position = np.full(len(groups), -1)
            position[dense_idx] = np.arange(len(dense_idx))
            pick = np.where(dense_group >= 0, position[np.maximum(dense_group, 0)], -1)
            has_dense = pick >= 0
            safe = np.maximum(pick, 0)
            pm.Deterministic("C1_dense", pt.where(has_dense, dense_c1[safe], np.nan),
                             dims="setup")
            pm.Deterministic("C2_dense", pt.where(has_dense, dense_c2[safe], np.nan),
                             dims="setup")
        c1 = pt.set_subtensor(c1[dense_idx], dense_c1)
        c2 = pt.set_subtensor(c2[dense_idx], dense_c2)
        return c1, c2

    def _alpha(self, groups, latent_idx, known_alpha):
        alpha = pt.as_tensor_variable(known_alpha)
        if not len(latent_idx):
            return alpha
        latent_alpha = pm.Beta("alpha_latent", 1.0, 1.0, dims="latent_alpha_group")
        model = pm.modelcontext(None)
        windows = self.inputs.extras["acceptance"]
        max_k = int(max([values.max() for name, (values, _) in windows.items()
                         if name == "acceptance_totals_k"] or [1]))
        acceptance_likelihood(latent_alpha, {name: model[name] for name in windows},
                              self.config, max_k=max_k)
        return pt.set_subtensor(alpha[latent_idx], latent_alpha)

    def _speculative_part(self, cfg, groups, sd_idx, setup_index, n_setups, decode, k, alpha,
                          rps_max, utilisation_logit, c1, c2, lengths=None):
        setup_of_sd = setup_index[sd_idx]
        decode_sd = decode[sd_idx]
        k_sd = k[sd_idx]
        alpha_sd = alpha[sd_idx]
        # tokens per cycle of each SD configuration: eq. (3)'s E(alpha, k), or the token
        # process's E(k) (``lengths``: per group)
        length_sd = (expected_accepted_expr(alpha_sd, k_sd, xp=pt) if lengths is None
                     else lengths[sd_idx])
        self._roof_lengths = (sd_idx, length_sd)

        # Each setup is normalised at an anchor configuration (its median number of
        # cycles): the data pin the anchor's C1 down to about a percent, and expressing
        # the other coefficients as fractions and ratios at the anchor keeps the weakly
        # identified ones (c1p, c2p, c2d) from bending the posterior into a banana
        # (they trade off linearly against c1v and c2v, which is curved in log space).
        low = groups["latency_low"].to_numpy(float)[sd_idx]
        anchor = median_cycle_anchors(groups, sd_idx, decode_sd, k_sd,
                                      [np.flatnonzero(setup_of_sd == s)
                                       for s in range(n_setups)])
        anchor_cycles = decode_sd[anchor] / length_sd[anchor]
        anchor_k = k_sd[anchor]
        share = cfg["share_scale"]

        def pooled(name, mean, sd):
            return pooled_normal(name, mean, sd, "setup", n_setups, spread_scale=0.5)

        def logit(p):
            return float(np.log(p / (1 - p)))

        # C1 side: anchor C1, the prefill fraction of it, and c1d/c1v.
        log_anchor_c1 = pm.Normal("log_anchor_C1", np.log(low[anchor]), 0.5, dims="setup")
        prefill_fraction_c1 = pm.math.sigmoid(pooled("logit_prefill_fraction_c1",
                                                     logit(0.02), share))
        log_ratio_c1 = pooled("log_ratio_c1d_c1v", float(np.log(0.1)), share)
        anchor_c1 = pt.exp(log_anchor_c1)
        ratio_c1 = pt.exp(log_ratio_c1)
        c1p = prefill_fraction_c1 * anchor_c1
        c1v = anchor_c1 * (1 - prefill_fraction_c1) / (anchor_cycles * (1 + anchor_k * ratio_c1))
        c1d = ratio_c1 * c1v

        # C2 side: a direction normalised at the anchor (prefill fraction, c2d/c2v), then
        # scaled so that the highest observed utilisation of the setup is u < 1.
        prefill_fraction_c2 = pm.math.sigmoid(pooled("logit_prefill_fraction_c2",
                                                     logit(0.3), share))
        ratio_c2 = pt.exp(pooled("log_ratio_c2d_c2v", float(np.log(0.05)), share))
        utilisation = pm.math.sigmoid(utilisation_logit)
        dir_c2p = prefill_fraction_c2
        dir_c2v = (1 - prefill_fraction_c2) / (anchor_cycles * (1 + anchor_k * ratio_c2))
        dir_c2d = ratio_c2 * dir_c2v
        _, unscaled_c2 = costs_for_acceptance_length(length_sd, k_sd, decode_sd, 0.0, 0.0, 0.0,
                                                     dir_c2p[setup_of_sd], dir_c2v[setup_of_sd],
                                                     dir_c2d[setup_of_sd])
        load = rps_max[sd_idx] * unscaled_c2
        # Largest utilisation per setup via a padded (setup x member) table.
        width = int(np.bincount(setup_of_sd, minlength=n_setups).max())
        table = np.zeros((n_setups, width), dtype=int)
        mask = np.zeros((n_setups, width), dtype=bool)
        for s in range(n_setups):
            members = np.flatnonzero(setup_of_sd == s)
            table[s, :len(members)] = members
            mask[s, :len(members)] = True
        # A smooth maximum (log-sum-exp at sharpness 40 on log-utilisations): it bounds
        # the true maximum from above, so the constraint still holds, and its gradient
        # has no kink for NUTS to trip on when two configurations swap places.
        sharp = 40.0
        log_load = pt.where(mask, pt.log(load[table]), -np.inf)
        largest = pt.exp(pt.logsumexp(sharp * log_load, axis=1) / sharp)
        scale = utilisation / largest
        c2p, c2v, c2d = dir_c2p * scale, dir_c2v * scale, dir_c2d * scale

        coefficients = {"c1p": c1p, "c1v": c1v, "c1d": c1d, "c2p": c2p, "c2v": c2v, "c2d": c2d}
        for name, value in coefficients.items():
            pm.Deterministic(name, value, dims="setup")
        c1_sd, c2_sd = costs_for_acceptance_length(
            length_sd, k_sd, decode_sd, c1p[setup_of_sd], c1v[setup_of_sd], c1d[setup_of_sd],
            c2p[setup_of_sd], c2v[setup_of_sd], c2d[setup_of_sd])
        c1 = pt.set_subtensor(c1[sd_idx], c1_sd)
        c2 = pt.set_subtensor(c2[sd_idx], c2_sd)
        return c1, c2

    # ------------------------------------------------------------------ token acceptance
    # acceptance_law="token": E(k) of each SD group from the token process of its setup,
    # fitted to the per-position counters of the setup's rows (bayes.acceptance), so that
    # every decision carries the acceptance uncertainty with the same draws.
    def _token_law(self) -> bool:
        law = (getattr(self, "acceptance_law_used", None)
               or self.resolved.get("acceptance_law", {}).get("value")   # a fit file's
               or self.config["acceptance_law"])
        return law == "token"

    def resolve_acceptance_law(self, groups, counters, counter_group) -> str:
        """The acceptance law of this data set: the option when set; for ``auto`` the
        token process where every SD group has per-position counter windows and each
        setup one acceptance (the token process is one per setup: groups told apart by a
        stated alpha are different acceptances it cannot hold), and iid otherwise, with
        why recorded (``resolve_auto``: stored in the fit file and said once by ``fit``)."""
        law = self.config["acceptance_law"]
        if law != "auto":
            self.acceptance_law_used = law
            return law
        is_sd = groups["is_sd"].to_numpy(bool)
        usable = counters["complete"] & (counter_group >= 0)
        counted = np.array([bool((usable & (counter_group == g)).any())
                            for g in range(len(groups))], dtype=bool)
        alphas = pd.to_numeric(groups["alpha"], errors="coerce")
        several = [setup for setup, values in alphas[is_sd].groupby(groups["setup"][is_sd])
                   if values.dropna().round(9).nunique() > 1]
        iid_options = [name for name in ("latent_alpha", "acceptance")
                       if self.config[name] != "auto"]
        if not is_sd.any():
            law, why = "iid", "no speculative rows"
        elif iid_options:
            law, why = "iid", (f"{', '.join(iid_options)} set: options of eq. (3)'s i.i.d. "
                               "alpha")
        elif not counted[is_sd].all():
            law, why = "iid", ("not every SD group has per-position counters "
                               "(accepted_tokens_pos1..k)" if counted[is_sd].any() else
                               "no per-position counters (accepted_tokens_pos1..k)")
        elif several:
            law, why = "iid", (f"setup '{several[0]}' holds groups at several stated alphas "
                               "(one token process per setup cannot be several acceptances)")
        else:
            law, why = "token", ("per-position counters on every SD group: E(k) of the token "
                                 "process, fitted with the costs")
        self.acceptance_law_used = law
        return self.resolve_auto("acceptance_law", law, why)

    def _token_lengths(self, groups):
        """Per group (a tensor; 1 where dense) the tokens per cycle E(k) of its setup's
        token process, and the process's counter likelihood."""
        import pymc as pm

        from bayesspec.bayes.acceptance import default_structure, token_acceptance_lengths

        setups = self.inputs.extras["setups"]
        windows = self.inputs.extras["acceptance_token"]
        structure = self.config["acceptance_structure"]
        structures = [default_structure(row) if structure == "auto" else structure
                      for row in setups.to_dict("records")]
        if structure == "auto":
            self.resolve_auto("acceptance_structure", sorted(set(structures)),
                              "by each drafter's kind")
        k = groups["k"].to_numpy(int)
        k_max = max(int(self.config["acceptance_k_max"]), int(k.max()))
        context = pm.modelcontext(None)
        totals = ({name: context[f"acceptance_token_{name}"] for name in
                   ("accepted_mean", "inv_drafts", "resolution")}
                  if not windows["has_positions"].all() else None)
        table = token_acceptance_lengths(windows, structures, len(setups), k_max,
                                         context["acceptance_token_counts"], totals=totals)
        setup = np.maximum(groups["setup_index"].to_numpy(int), 0)
        return table[setup, k]

    # ------------------------------------------------------------------ reuse
    def posterior_variables(self) -> list[str]:
        return ["noise_base", "noise_load", "c1p", "c1v", "c1d", "c2p", "c2v", "c2d",
                "C1_dense", "C2_dense", "alpha_latent", "share_C1s", "share_C2s",
                "share_C1s_dense", "share_C2s_dense"] + TOKEN_VARIABLES

    # ------------------------------------------------------------------ prediction contract
    def decision_variables(self) -> list[str]:
        return super().decision_variables() + list(COEFFICIENTS) + [
            "C1_dense", "C2_dense", "alpha_latent", "C1u", "C1s", "C2u", "C2s"] + TOKEN_VARIABLES

    def _split_offset(self) -> float:
        return float(self.config["moe_token_offset"])

    def noise_load_bounded(self, fit) -> bool:
        # eq. (4)'s split likelihood passes its own mean law, for every group of the fit
        return (super().noise_load_bounded(fit) and not (
            "moe_split" in fit.groups.columns and bool(fit.groups["moe_split"].any())))

    def group_curve(self, fit, group: int) -> Curve:
        """A group's curve: eq. (4) with its split costs for a sparse verifier."""
        row = fit.groups.iloc[group]
        if not bool(row.get("moe_split", False)):
            if row.get("mean_law") == "roof" and not np.isfinite(row.get("roof_cycles", 1.0)):
                curve = self.roof_curve(fit, group, fit.draws("C1", group),
                                        fit.draws("C2", group), str(row["label"]),
                                        cycles=self._group_cycles(fit, group))
                if curve is not None:
                    curve.rps_fitted_max = float(row["rps_max"])
                    return self.with_run_effect(fit, group, curve)
            return super().group_curve(fit, group)
        return MoECurve(*(fit.draws(n, group) for n in ("C1u", "C1s", "C2u", "C2s")),
                        m=float(row["experts_active"]), M=float(row["experts_total"]),
                        tokens=float(row["tokens_per_request"]), offset=self._split_offset(),
                        label=str(row["label"]), noise=self.noise(fit))

    def _group_cycles(self, fit, group: int) -> np.ndarray:
        """Draws of a fitted SD group's engine steps per request, decode / E: E from the
        token process where the fit has one, from the latent alpha's draws, or from the
        table's alpha."""
        row = fit.groups.iloc[group]
        k = int(row["k"])
        decode = float(row["decode_tokens"])
        if "acceptance_length" in fit.posterior:
            return decode / fit.draws("acceptance_length", setup=int(row["setup_index"]))[:, k]
        if bool(row.get("alpha_latent", False)):
            alpha = fit.posterior["alpha_latent"].sel(latent_alpha_group=str(row["label"]))
            alpha = np.asarray(alpha.stack(sample=("chain", "draw")).values, dtype=float)
        else:
            alpha = float(row["alpha"])
        return decode / expected_accepted(alpha, k)

    def _setup_roof(self, fit, setup: int) -> dict | None:
        """The compute roof of one setup for any k (None where its groups follow eq. (1)):
        its cards' bounds (k does not change them) and the learned factors' draws."""
        from bayesspec.laws.roofline import ROOF_CARD_FIELDS

        groups = fit.groups
        if "mean_law" not in groups or "roof_memory_factor" not in fit.posterior:
            return None
        members = np.flatnonzero((groups["setup_index"].to_numpy(int) == setup)
                                 & (groups["mean_law"] == "roof").to_numpy(bool))
        if not len(members):
            return None
        row = groups.iloc[int(members[0])]
        # fits made before the prompts entered the step: the decode tokens' step alone
        return {"cards": {name: float(row.get(name, 0.0)) for name in ROOF_CARD_FIELDS},
                "memory_factor": fit.draws("roof_memory_factor"),
                "compute_factor": fit.draws("roof_compute_factor"),
                "bend": fit.draws("roof_bend")}

    def law(self, fit, selection: dict, *, metric: str | None = None) -> CoefficientLaw:
        """Any (alpha, k) of one setup from its six coefficients (eq. 3); a sparse
        verifier's costs split by its learned shares (eq. 4). Mean latency only."""
        self.check_metric(fit, metric)
        if fit.setups.empty:
            raise BadInput("this fit has no speculative rows (k > 0); nothing to compare")
        s = fit.select_setup(**selection)
        setup = fit.setups.iloc[s]
        noise = self.noise(fit)
        label = str(setup["setup"])
        c1_dense, c2_dense = fit.draws("C1_dense", setup=s), fit.draws("C2_dense", setup=s)
        split = None
        if bool(setup.get("moe_split", False)):
            config = self.config
            split = MoESplit(m=float(setup["experts_active"]), M=float(setup["experts_total"]),
                             offset=self._split_offset(),
                             verify_tokens=str(config["moe_verify_tokens"]),
                             sd_shares=(fit.draws("share_C1s", setup=s),
                                        fit.draws("share_C2s", setup=s)))
        dense = None
        groups = fit.groups
        dense_group = int(setup["dense_group"])
        if not np.isnan(c1_dense).all():
            if split is None:
                dense = (self.roof_curve(fit, dense_group, c1_dense, c2_dense,
                                         f"{label} dense", noise=noise)
                         if dense_group >= 0 else None)
                if dense is None:
                    dense = Curve(c1_dense, c2_dense, label=f"{label} dense", noise=noise,
                                  **(fitted_cap(groups, dense_group, fit)
                                     if dense_group >= 0 else {}))
            else:
                s1 = fit.draws("share_C1s_dense", setup=s)
                s2 = fit.draws("share_C2s_dense", setup=s)
                dense = MoECurve(c1_dense * (1 - s1), c1_dense * s1, c2_dense * (1 - s2),
                                 c2_dense * s2, m=split.m, M=split.M, tokens=1.0,
                                 offset=split.offset, label=f"{label} dense", noise=noise)
            if dense_group >= 0:
                dense.rps_fitted_max = float(groups["rps_max"].iloc[dense_group])
        sd_groups = np.flatnonzero(groups["setup_index"].to_numpy(int) == s)
        alphas = pd.to_numeric(groups["alpha"], errors="coerce").to_numpy(float)
        measured = [MeasuredConfiguration(None if np.isnan(alphas[g]) else float(alphas[g]),
                                          int(groups["k"].iloc[g]),
                                          float(groups["rps_max"].iloc[g]))
                    for g in sd_groups]
        limits = (engine_limits(groups, int(sd_groups[0]), setup.get("prefill_tokens"),
                                setup.get("decode_tokens")) if len(sd_groups) else {})
        if limits and "wait_scale" in groups.columns:
            limits["wait_scale"] = float(groups["wait_scale"].iloc[int(sd_groups[0])])
        law = CoefficientLaw(label, dense, {n: fit.draws(n, setup=s) for n in COEFFICIENTS},
                             float(setup["decode_tokens"]), moe=split, noise=noise,
                             engine_limits=limits, measured_configurations=measured,
                             dense_hint=dense_hint(setup),
                             roof=None if split is not None else self._setup_roof(fit, s))
        if "acceptance_length" in fit.posterior:
            # the token process's E(k), draw by draw with the coefficients (joint)
            law.acceptance_lengths = fit.draws("acceptance_length", setup=s)
            law.joint_acceptance = True
        return law

    def comparable_parameters(self, fit) -> dict:
        """C1, C2 per group and the six coefficients per setup."""
        out = super().comparable_parameters(fit)
        setups = fit.setups["setup"].tolist() if not fit.setups.empty else []
        for name in COEFFICIENTS:
            out[name] = {label: fit.draws(name, setup=s) for s, label in enumerate(setups)}
        return out

    @classmethod
    def default_sbc_design(cls) -> pd.DataFrame:
        """Llama-3.1-8B + EAGLE-3 at 512/512 tokens: the dense baseline and (alpha, k) in
        {0.6, 0.8} x {1, 4} with alpha known; 8 rates per curve, the top one saturated
        and excluded (7 points per curve, 35 in all)."""
        from bayesspec.data import prepare
        from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth

        truth = speculative_truth(alphas=(0.6, 0.8), ks=(1, 4))
        return prepare(generate_sweeps(truth, n_rates=8, seed=0), source="<sbc design>")
