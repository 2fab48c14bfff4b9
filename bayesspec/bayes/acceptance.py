"""Acceptance by draft position, from vLLM's per-position counters.

Eq. (3) takes every drafted token as accepted with the same probability alpha (i.i.d.).
Measured drafters accept less the further into the draft: the conditional rate
alpha_i = P(accept position i | positions before it accepted) decays with i. This model
fits, per drafter setup (verifier, drafter), a smooth decay

    logit alpha_i = a + b * log(i)          (b = 0: the i.i.d. case)

from the counters of every window (a row: ``num_drafts`` drafts, ``accepted_tokens_posI``
of them with their first I tokens accepted), with prompt-to-prompt overdispersion: in a
window position i's rate is Beta(alpha_i kappa, (1 - alpha_i) kappa), so the conditional
counts are a Beta-Binomial chain. It answers the acceptance length
E(k) = 1 + sum_{j<=k} prod_{i<=j} alpha_i (:func:`bayesspec.laws.expected_accepted_positions_expr`)
for any k, measured or not, with intervals. ``decay=False`` fits the i.i.d. model; PSIS-LOO
between the two says whether the data support the decay.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from ..lazymodule import lazy_module

pm, pt = lazy_module("pymc"), lazy_module("pytensor.tensor")  # loaded on first use

from ..errors import BadInput
from ..laws import expected_accepted_positions_expr

POSITION_COLUMN = "accepted_tokens_pos{}"
SETUP_COLUMNS = ("verifier", "drafter")


def position_windows(data: pd.DataFrame) -> dict:
    """The windows with complete per-position counters: per window its setup, k, drafts
    and the conditional trials/accepted per position (positions beyond k masked)."""
    rows = data.loc[data["k"].astype(int) > 0]
    source = data.attrs.get("source_file")
    if rows.empty:
        raise BadInput("no speculative rows (k > 0): nothing to learn acceptance from",
                       file=source)
    k = rows["k"].to_numpy(int)
    max_k = int(k.max())
    missing = [POSITION_COLUMN.format(i) for i in range(1, max_k + 1)
               if POSITION_COLUMN.format(i) not in rows.columns]
    if "num_drafts" not in rows.columns or missing:
        raise BadInput("per-position acceptance needs num_drafts and accepted_tokens_pos1.."
                       f"pos{max_k} (vLLM's spec_decode_num_accepted_tokens_per_pos; "
                       "`bayesspec ingest --metrics` reads them)", file=source,
                       column=(missing or ["num_drafts"])[0])
    drafts = pd.to_numeric(rows["num_drafts"], errors="coerce").to_numpy(float)
    counts = np.stack([pd.to_numeric(rows[POSITION_COLUMN.format(i)], errors="coerce")
                       .to_numpy(float) for i in range(1, max_k + 1)], axis=1)
    inside = np.arange(1, max_k + 1)[None, :] <= k[:, None]
    usable = np.isfinite(drafts) & (drafts > 0) & np.all(np.isfinite(counts) | ~inside, axis=1)
    if not usable.any():
        raise BadInput("no row has complete per-position counters", file=source,
                       column="accepted_tokens_pos1")
    rows, k, drafts, counts, inside = (rows.loc[usable], k[usable], drafts[usable],
                                       counts[usable], inside[usable])
    counts = np.where(inside, counts, 0.0)
    trials = np.concatenate([drafts[:, None], counts[:, :-1]], axis=1)
    bad = inside & (counts > trials)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise BadInput("per-position accepted counts must not increase with the position",
                       file=source, row=int(rows.index[row]) + 1,
                       column=POSITION_COLUMN.format(int(np.flatnonzero(bad[row])[0]) + 1))
    setup_keys = rows[list(SETUP_COLUMNS)].astype(str).agg(" + ".join, axis=1)
    setups = list(dict.fromkeys(setup_keys))
    return {"setup": np.array([setups.index(s) for s in setup_keys]), "setups": setups,
            "k": k, "drafts": drafts, "trials": np.where(inside, trials, 0.0),
            "accepted": counts, "inside": inside, "max_k": max_k,
            "k_measured": [sorted(set(k[setup_keys.to_numpy() == s])) for s in setups]}


class PositionAcceptanceModel:
    """Per-position acceptance: build / fit / predict. Not a latency model: it feeds
    the acceptance length E(k) that eq. (3) uses."""

    name = "position-acceptance"
    version = "1"
    # What inference.settings_for fills in when the caller leaves a setting unset.
    default_tune = 1000
    default_draws = 1000
    target_accept = 0.9
    adaptation = "diag"
    init = "jitter"
    #: What the answers are computed from (the convergence verdict judges these).
    decision_variables = ["logit_alpha_1", "decay", "log_concentration"]

    def __init__(self, *, decay: bool = True, concentration_prior: tuple = (np.log(200.0), 1.5)):
        self.decay = decay
        self.concentration_prior = concentration_prior
        self.windows: dict | None = None
        self.pm_model: pm.Model | None = None
        self.tree = None            # the sampled xarray DataTree

    def build(self, data: pd.DataFrame) -> pm.Model:
        windows = self.windows = position_windows(data)
        n_setups = len(windows["setups"])
        coords = {"setup": windows["setups"], "window": np.arange(len(windows["k"])),
                  "position": np.arange(1, windows["max_k"] + 1)}
        log_position = np.log(np.arange(1, windows["max_k"] + 1, dtype=float))
        with pm.Model(coords=coords) as model:
            level = pm.Normal("logit_alpha_1", 1.0, 1.5, dims="setup")
            slope = (pm.Normal("decay", 0.0, 1.0, dims="setup") if self.decay
                     else pt.zeros(n_setups))
            logit = level[:, None] + slope[:, None] * log_position[None, :]
            conditional = pm.Deterministic("alpha_position", pm.math.sigmoid(logit),
                                           dims=("setup", "position"))
            kappa = pm.Deterministic("concentration", pt.exp(pm.Normal(
                "log_concentration", *self.concentration_prior, dims="setup")), dims="setup")
            s = windows["setup"]
            rate = conditional[s]
            inside = windows["inside"]
            # Positions beyond a window's k have 0 trials and 0 accepted: log p = 0.
            pm.BetaBinomial("position_count", n=windows["trials"].astype(int),
                            alpha=rate * kappa[s][:, None],
                            beta=(1.0 - rate) * kappa[s][:, None],
                            observed=windows["accepted"].astype(int) * inside,
                            dims=("window", "position"))
        self.pm_model = model
        return model

    def fit(self, data: pd.DataFrame, settings=None):
        """Sample the posterior (settings left unset: the defaults above) and return the
        DataTree (also kept as ``tree``)."""
        from ..inference import sample_model, settings_for

        self.tree = sample_model(self.build(data), settings_for(self, settings))
        return self.tree

    @property
    def posterior(self):
        return self.tree["posterior"].to_dataset()

    def verdict(self) -> dict:
        from ..inference import convergence_verdict

        names = [n for n in self.decision_variables if n in self.posterior]
        return convergence_verdict(self.tree, names)

    # ------------------------------------------------------------------ answers
    def conditional_draws(self, setup: int, k_max: int) -> np.ndarray:
        """(S, k_max) draws of alpha_i, extrapolated past the measured positions by the
        fitted decay."""
        post = self.posterior
        level = post["logit_alpha_1"].isel(setup=setup).stack(s=("chain", "draw")).values
        slope = (post["decay"].isel(setup=setup).stack(s=("chain", "draw")).values
                 if self.decay else np.zeros_like(level))
        logit = level[:, None] + slope[:, None] * np.log(np.arange(1, k_max + 1))[None, :]
        return 1.0 / (1.0 + np.exp(-logit))

    def acceptance_length_draws(self, setup: int, k_max: int) -> np.ndarray:
        """(S, k_max + 1) draws of E(k), k = 0..k_max."""
        return expected_accepted_positions_expr(self.conditional_draws(setup, k_max))

    def log_likelihood(self) -> np.ndarray:
        """Pointwise log-likelihood per window (chains, draws, windows), for PSIS-LOO: the
        model's own Beta-Binomial terms summed over positions (beyond a window's k they
        are 0)."""
        pointwise = pm.compute_log_likelihood(self.tree, model=self.pm_model,
                                              var_names=["position_count"],
                                              extend_inferencedata=False, progressbar=False)
        return np.asarray(pointwise["position_count"].sum("position").values, dtype=float)


def acceptance_report(data: pd.DataFrame, *, k_max: int = 8, prob: float = 0.9,
                      settings=None) -> dict:
    """Fit the decay and the i.i.d. models, compare them by PSIS-LOO, and answer per
    setup: alpha_i per position and E(k) for k = 1..k_max (measured k marked)."""
    import arviz as az
    import xarray as xr

    tail = (1.0 - prob) / 2.0
    fits = {}
    for name, decay in (("decay", True), ("iid", False)):
        model = PositionAcceptanceModel(decay=decay)
        model.fit(data, settings)
        fits[name] = model
    loo, pointwise_elpd = {}, {}
    for name, model in fits.items():
        pointwise = model.log_likelihood()
        tree = xr.DataTree.from_dict({
            "posterior": model.posterior,
            "log_likelihood": xr.Dataset({"windows": (("chain", "draw", "window"), pointwise)})})
        result = az.loo(tree, var_name="windows", pointwise=True)
        pointwise_elpd[name] = np.asarray(result.elpd_i, dtype=float)
        loo[name] = {"elpd_loo": float(result.elpd), "se": float(result.se),
                     "pareto_k_max": float(np.nanmax(np.asarray(result.pareto_k)))}
    gain = pointwise_elpd["decay"] - pointwise_elpd["iid"]
    difference = float(gain.sum())
    difference_se = float(np.sqrt(gain.size) * gain.std(ddof=1)) if gain.size > 1 else np.nan
    model = fits["decay"]
    verdict = model.verdict()
    setups = []
    for s, label in enumerate(model.windows["setups"]):
        conditional = model.conditional_draws(s, k_max)
        length = model.acceptance_length_draws(s, k_max)
        measured = set(int(k) for k in model.windows["k_measured"][s])
        measured_max = max(measured)

        def interval(values):
            lo, median, hi = np.quantile(values, [tail, 0.5, 1 - tail])
            return {"median": float(median), "lo": float(lo), "hi": float(hi)}

        setups.append({
            "setup": label,
            "k_measured": sorted(measured),
            "alpha_position": [{"position": i + 1, **interval(conditional[:, i]),
                                "extrapolated": i + 1 > measured_max}
                               for i in range(k_max)],
            "decay": interval(model.posterior["decay"].isel(setup=s).values.ravel()),
            "acceptance_length": [{"k": k, **interval(length[:, k]),
                                   "measured": k in measured, "extrapolated": k > measured_max}
                                  for k in range(1, k_max + 1)]})
    # The decay earns its place when it predicts held-out windows better by more than
    # twice the standard error of the difference (and by more than 4 elpd, the usual
    # floor below which PSIS-LOO differences are noise).
    supported = difference > max(4.0, 2.0 * difference_se)
    return {"prob": prob, "k_max": k_max, "setups": setups, "loo": loo,
            "elpd_difference": difference, "elpd_difference_se": difference_se,
            "decay_supported": bool(supported),
            "convergence": verdict["status"], "convergence_text": verdict["text"]}


def acceptance_length_draws(data: pd.DataFrame, k_max: int, *, drafter: str | None = None,
                            settings=None) -> tuple[np.ndarray, str, dict]:
    """Fit the decay model to per-position counters and return E(k) draws (S, k_max + 1)
    of the setup whose drafter is ``drafter`` (the only one when None), its label and the
    convergence verdict."""
    model = PositionAcceptanceModel(decay=True)
    model.fit(data, settings)
    setups = model.windows["setups"]
    drafters = [label.split(" + ", 1)[1] for label in setups]
    if drafter is not None:
        chosen = [i for i, d in enumerate(drafters) if d.strip().lower() == drafter.strip().lower()]
    else:
        chosen = list(range(len(setups)))
    if len(chosen) != 1:
        raise BadInput(f"the counters hold setups {', '.join(setups)}; "
                       + ("none" if not chosen else "more than one")
                       + (f" with drafter '{drafter}'" if drafter else "")
                       + ": name the drafter", argument="drafter")
    return model.acceptance_length_draws(chosen[0], k_max), setups[chosen[0]], model.verdict()
