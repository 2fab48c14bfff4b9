"""A raw table made a tidy one: every value checked, the design defaults filled, catalog
covariates attached, units judged (against the catalog where it knows the setup), and
saturated points marked.

Any problem raises :class:`bayesspec.errors.BadInput` naming the file, the row (1-based
data row, the header is not counted) and the column.
"""

from __future__ import annotations

import difflib

import numpy as np
import pandas as pd

from bayesspec.data.cells import (as_booleans, as_floats, as_integers, as_strings, blank_cells,
                                  first_bad_row, is_missing)
from bayesspec.data.columns import (PERCENTILE_RULE_COLUMN, BOOLEAN_COLUMNS, DESIGN_DEFAULTS, ENGINE_LIMIT_COLUMNS,
                                    INTEGER_COLUMNS, NONNEGATIVE_FLOAT_COLUMNS,
                                    POSITIVE_FLOAT_COLUMNS, REQUIRED_COLUMNS, STRING_COLUMNS,
                                    SUMMARY_COLUMNS, near_miss, with_clean_columns)
from bayesspec.data.engine_limits import apply_engine_limits, check_engine_limits
from bayesspec.data.groups import (assign_groups, check_one_acceptance_per_group, group_columns,
                                  group_label)
from bayesspec.data.saturation import LAW_MIN_POINTS, SaturationRule, law_line, mark_saturated
from bayesspec.data.units import convert as convert_units
from bayesspec.errors import BadInput
from bayesspec.laws.tails import QUANTILE_RULES


def prepare(raw: pd.DataFrame, *, source: str = "<data>", catalog=None,
            saturation: SaturationRule | None = None,
            engine_limits: dict | None = None, units=()) -> pd.DataFrame:
    """Validate an in-memory table the same way as a file (used by tests and readers).

    Rates and latencies that no LLM server gives (the verifier's roofline on the GPU
    where the catalog knows both; the pace per output token and Little's law always) are
    refused, naming the likely unit mistake (:mod:`bayesspec.data.units`)."""
    frame = with_clean_columns(raw, source)
    summaries = [c for c in SUMMARY_COLUMNS if c in frame.columns]
    mean_given = "latency_mean_s" in frame.columns and not blank_cells(frame["latency_mean_s"]).all()
    for column in REQUIRED_COLUMNS:
        if column not in frame.columns:
            if column == "latency_mean_s" and summaries:
                continue          # percentiles without a mean: the tails model's case
            near = difflib.get_close_matches(column, [str(c) for c in frame.columns], n=1,
                                             cutoff=0.6)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            if column == "latency_mean_s":
                hint += " (or give latency percentiles: latency_p50_s, ttft_p99_s, ...)"
            raise BadInput(f"required column is missing{hint}", file=source, column=column)
    if not mean_given and summaries:
        frame = frame.drop(columns=["latency_mean_s"], errors="ignore")
    for column in frame.columns:
        known = near_miss(column)
        if known is not None:
            raise BadInput(f"unknown column: did you mean '{known}'? (rename it; columns "
                           f"that are not near misses of known ones are kept as they are)",
                           file=source, column=column)

    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for column in frame.columns:
        values = frame[column]
        if column in STRING_COLUMNS:
            out[column] = as_strings(values)
        elif column in BOOLEAN_COLUMNS:
            out[column] = as_booleans(values, source, column)
        elif column in INTEGER_COLUMNS:
            out[column] = as_integers(values, source, column)
        elif column in POSITIVE_FLOAT_COLUMNS or column in NONNEGATIVE_FLOAT_COLUMNS \
                or column == "alpha":
            out[column] = as_floats(values, source, column,
                                     required=column in REQUIRED_COLUMNS)
        else:
            out[column] = values.reset_index(drop=True)

    if "latency_mean_s" not in out.columns:
        out["latency_mean_s"] = np.nan
        _check_summaries_given(out, summaries, source)
    if units:
        out = convert_units(out, units)
    apply_engine_limits(out, engine_limits or {}, source)
    _check_ranges(out, source)
    for column, default in DESIGN_DEFAULTS.items():
        if column not in out.columns:
            out[column] = default
    out["prefill_tokens"] = out["prefill_tokens"].astype("Int64")
    out["decode_tokens"] = out["decode_tokens"].astype("Int64")
    k_given = out["k"].notna()
    out["k"] = out["k"].fillna(0).astype("int64")
    out["alpha"] = out["alpha"].astype(float)
    _check_speculative_rows(out, k_given, "k" in frame.columns, source)
    _check_design(out, source)
    check_engine_limits(out, source)
    check_one_acceptance_per_group(out, source)
    catalog = _attach_catalog(out, catalog)
    mark_saturated(out, saturation or SaturationRule())
    _check_units(out, catalog, source, units)
    out.attrs["source_file"] = source
    if units:
        out.attrs["units_converted"] = ",".join(units)
    return out


def _check_summaries_given(out: pd.DataFrame, summaries: list[str], source: str) -> None:
    """Without a mean latency, every row needs a latency summary of its own."""
    given = np.zeros(len(out), dtype=bool)
    for column in summaries:
        given |= (out[column] > 0).to_numpy()
    if not given.all():
        raise BadInput("no latency: the file has no latency_mean_s and this row has none of "
                       f"its percentile columns ({', '.join(summaries)})", file=source,
                       row=first_bad_row(~pd.Series(given)), column=summaries[0])


def _check_ranges(out: pd.DataFrame, source: str) -> None:
    for column in POSITIVE_FLOAT_COLUMNS:
        bad = out[column] <= 0
        if bad.any():
            row = first_bad_row(bad)
            raise BadInput(f"must be > 0, got {out[column].iloc[row - 1]:g}", file=source,
                           row=row, column=column)
    for column in NONNEGATIVE_FLOAT_COLUMNS:
        if column in out.columns:
            bad = out[column] < 0
            if bad.any():
                row = first_bad_row(bad)
                raise BadInput(f"must be >= 0, got {out[column].iloc[row - 1]:g}",
                               file=source, row=row, column=column)
    if "alpha" in out.columns:
        bad = (out["alpha"] < 0) | (out["alpha"] > 1)
        if bad.any():
            row = first_bad_row(bad)
            raise BadInput(f"must be within [0, 1], got {out['alpha'].iloc[row - 1]:g}",
                           file=source, row=row, column="alpha")
    if PERCENTILE_RULE_COLUMN in out.columns:
        stated = out[PERCENTILE_RULE_COLUMN].fillna("").astype(str).str.strip()
        bad = (stated != "") & ~stated.isin(QUANTILE_RULES)
        if bad.any():
            row = first_bad_row(bad)
            raise BadInput(f"must be one of {', '.join(QUANTILE_RULES)}, got "
                           f"{stated.iloc[row - 1]!r}", file=source, row=row,
                           column=PERCENTILE_RULE_COLUMN)
    for column in INTEGER_COLUMNS:
        if column not in out.columns:
            continue
        low = 1 if column in {"prefill_tokens", "decode_tokens", "n_requests",
                              "experts_total", "max_concurrency",
                              *ENGINE_LIMIT_COLUMNS} else 0
        bad = out[column].notna() & (out[column] < low)
        if bad.any():
            row = first_bad_row(bad.fillna(False))
            raise BadInput(f"must be an integer >= {low}, got {out[column].iloc[row - 1]}",
                           file=source, row=row, column=column)


def _check_speculative_rows(out: pd.DataFrame, k_given: pd.Series, k_column: bool,
                            source: str) -> None:
    """A drafter or an alpha on a row that is dense by k (k = 0, empty or no k column) is
    a contradiction: the row would silently be fitted as dense."""
    drafter = out["drafter"].ne("")
    alpha = out["alpha"].notna()
    bad = (drafter | alpha) & out["k"].eq(0)
    if not bad.any():
        return
    row = first_bad_row(bad)
    i = row - 1
    what = (f"drafter '{out['drafter'].iloc[i]}'" if drafter.iloc[i] else "")
    if alpha.iloc[i]:
        what += (" and " if what else "") + f"alpha {out['alpha'].iloc[i]:g}"
    if not k_column:
        state = "there is no k column"
    elif not k_given.iloc[i]:
        state = "k is empty"
    else:
        state = "k is 0 (dense)"
    raise BadInput(f"{state} but the row has {what}: add k (the draft length) to "
                   f"speculative rows, or clear drafter and alpha on dense rows", file=source,
                   row=row, column="k")


def _check_design(out: pd.DataFrame, source: str) -> None:
    if {"experts_active", "experts_total"} <= set(out.columns):
        bad = (out["experts_active"] > out["experts_total"]).fillna(False)
        if bad.any():
            raise BadInput("more active experts than experts", file=source,
                           row=first_bad_row(bad), column="experts_active")
    if {"draft_tokens", "accepted_tokens"} <= set(out.columns):
        bad = (out["accepted_tokens"] > out["draft_tokens"]).fillna(False)
        if bad.any():
            raise BadInput("more accepted than drafted tokens", file=source,
                           row=first_bad_row(bad), column="accepted_tokens")


def _attach_catalog(out: pd.DataFrame, catalog):
    """Fill parameter counts and expert counts from the catalog where the data lack them.
    Returns the catalog used (None when none could be loaded)."""
    if catalog is None:
        try:
            from bayesspec.data.catalog import default_catalog
            catalog = default_catalog()
        except Exception:  # an unusable user catalog must not block reading data
            return None
    def lookup(name):
        return catalog.find_model(name) if name else None

    cards = {name: lookup(name) for name in set(out["verifier"]) | set(out["drafter"])}
    fill = {
        "verifier_params_b": ("verifier", lambda c: c.params_total_b),
        "drafter_params_b": ("drafter", lambda c: c.params_total_b),
        "experts_active": ("verifier", lambda c: c.experts_active if c.is_moe else pd.NA),
        "experts_total": ("verifier", lambda c: c.experts_total if c.is_moe else pd.NA),
    }
    for column, (by, getter) in fill.items():
        from_catalog = out[by].map(lambda name: getter(cards[name]) if cards.get(name) else pd.NA)
        if column in out.columns:
            out[column] = out[column].where(out[column].notna(), from_catalog)
        else:
            out[column] = from_catalog
    for column in ("verifier_params_b", "drafter_params_b"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype(float)
    for column in ("experts_active", "experts_total"):
        out[column] = pd.to_numeric(out[column], errors="coerce").astype("Int64")
    return catalog


def _request_latency(out: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Each row's request latency for the unit bounds and the column it came from: the
    mean, or the median where a file gives percentiles only."""
    latency = out["latency_mean_s"].to_numpy(float)
    if np.isfinite(latency).any() or "latency_p50_s" not in out.columns:
        return latency, "latency_mean_s"
    return out["latency_p50_s"].to_numpy(float), "latency_p50_s"


def _check_units(out: pd.DataFrame, catalog, source: str, units) -> None:
    """Refuse a table whose rates or latencies no LLM server gives, naming the likely
    unit mistake: each group against the roofline of its verifier on its GPU where the
    catalog knows both, every group's pace per output token, and every point's requests
    in flight (Little's law), cards or not (:mod:`bayesspec.data.units`)."""
    from bayesspec.data.units import (GroupEvidence, in_flight_problem,
                                      measured_in_flight_problem, pace_problem,
                                      plausibility_problem)

    rps = out["rps"].to_numpy(float)
    latency, latency_column = _request_latency(out)
    kept = ~out["excluded"].to_numpy(bool)
    columns = group_columns(out)
    _, index = assign_groups(out)
    with_gpu = catalog is not None and "gpu" in out.columns
    cards: dict = {}
    for group in np.unique(index):
        members = np.flatnonzero(index == group)
        first = out.iloc[members[0]]
        used = members[kept[members]]
        ceiling = None
        if len(used) >= LAW_MIN_POINTS and latency[used].max() > 1.3 * latency[used].min():
            line = law_line(rps[used], latency[used])
            ceiling = None if line is None else -line[0] / line[1]
        lowest = members[np.argmin(rps[members])]
        timed = members[np.isfinite(latency[members])]
        fastest = timed[np.argmin(latency[timed])] if len(timed) else None
        evidence = GroupEvidence(
            label=group_label(first.to_dict(), columns), row=int(members[0]) + 1,
            prefill_tokens=float(first["prefill_tokens"]) if not is_missing(first["prefill_tokens"])
            else None,
            decode_tokens=float(first["decode_tokens"]) if not is_missing(first["decode_tokens"])
            else None,
            k=int(first["k"]), batch1_latency=float(latency[lowest]),
            rps_max=float(rps[members].max()), ceiling=ceiling,
            fastest_latency=float(latency[fastest]) if fastest is not None else np.nan,
            fastest_row=int(fastest) + 1 if fastest is not None else None,
            latency_column=latency_column)
        problem, row = None, evidence.row
        if with_gpu:
            key = (first["verifier"], first["gpu"])
            if key not in cards:
                cards[key] = (catalog.find_model(key[0]) if key[0] else None,
                              catalog.find_gpu(key[1]) if key[1] else None)
            verifier_card, gpu_card = cards[key]
            if verifier_card is not None and gpu_card is not None:
                problem = plausibility_problem(evidence, verifier_card, gpu_card, units)
        if problem is None:
            problem, row = pace_problem(evidence, units), evidence.fastest_row
        if problem is not None:
            column, message = problem
            raise BadInput(message, file=source, row=row, column=column)
    requests = (pd.to_numeric(out["n_requests"], errors="coerce").to_numpy(float)
                if "n_requests" in out.columns else None)
    crowded = in_flight_problem(rps, latency, requests, units, latency_column, fitted=kept)
    if crowded is None and "mean_concurrency" in out.columns:
        crowded = measured_in_flight_problem(
            rps, latency, pd.to_numeric(out["mean_concurrency"], errors="coerce"), units,
            latency_column, fitted=kept)
    if crowded is not None:
        i, column, message = crowded
        raise BadInput(message, file=source, row=i + 1, column=column)
