"""The rate hold-out: fit on each group's lower rates only and predict the higher ones,
the question a user extrapolating from a light load test asks."""

from __future__ import annotations

import pandas as pd

from bayesspec.checks.posterior_predictive import predictive_check


def split_by_rate(data: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows at or below ``fraction`` of their group's highest unsaturated rate, and the
    other unsaturated rows. Groups are the model's (``data.assign_groups`` on the included rows)."""
    from bayesspec.data import assign_groups, included
    from bayesspec.errors import BadInput

    if not 0.0 < fraction < 1.0:
        raise BadInput(f"the rate fraction must be in (0, 1), got {fraction}",
                       argument="fraction")
    rows = included(data)
    _, index = assign_groups(rows)
    top = pd.Series(rows["rps"].to_numpy(float)).groupby(index).transform("max").to_numpy()
    low = rows["rps"].to_numpy(float) <= fraction * top
    # Saturated rows go too: a user extrapolating from a light load test has none.
    return data.loc[rows.index[low]], data.loc[rows.index[~low]]


def rate_holdout_check(data: pd.DataFrame, *, model: str = "dense", fraction: float = 0.6,
                       prob: float = 0.9, settings=None, config: dict | None = None,
                       catalog=None, seed: int = 0):
    """Fit ``model`` on each group's rates up to ``fraction`` of its highest measured
    rate, check it on those points and predict the rest. Returns (fit, document)."""
    from bayesspec.bayes.workflow import fit as fit_model

    from bayesspec.data import EXTRA_GROUP_COLUMNS, GROUP_COLUMNS, group_label, row_group_labels

    low, high = split_by_rate(data, fraction)
    result = fit_model(low, model, settings=settings, config=config, catalog=catalog)
    document = predictive_check(result, high, prob=prob, seed=seed)
    document["fraction"] = fraction
    # A one-point sweep has nothing at or below a fraction of its top rate: it cannot be
    # fitted here, so it is named rather than silently left out.
    columns = [c for c in result.groups.columns if c in high.columns
               and c in set(GROUP_COLUMNS) | set(EXTRA_GROUP_COLUMNS)]
    unfitted = sorted({group_label(row, columns) for row, known in zip(
        high.to_dict("records"), row_group_labels(high, result.groups)) if not known})
    if unfitted:
        document["unfitted_groups"] = unfitted
        document["verdict"] = (f"{document['verdict'].rstrip('.')}. {len(unfitted)} "
                               f"group(s) had no rate at or below {fraction:g} of their "
                               "top rate and were not checked: " + ", ".join(unfitted[:6]))
    return result, document
