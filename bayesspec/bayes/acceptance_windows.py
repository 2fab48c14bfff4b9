"""Acceptance counter windows: the rows of a counter file (or a speculative sweep's SD
rows) read into windows of setups, and the structures a setup can be given.

A window is one run, or the stretch between two scrapes: N drafts at draft length k with
the drafts that accepted exactly a = 0..k tokens (from vLLM's per-position counters), or
totals alone (accepted tokens per draft; a published acceptance length, with its
reported digit). Windows whose labels differ in any column are different setups and are
never pooled. The model that fits them is :mod:`bayesspec.bayes.acceptance_model`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesspec.data import COUNTER_LABEL_COLUMNS, POSITION_COUNT_COLUMN
from bayesspec.errors import BadInput


#: The token-process structures: which parts of the chain are switched on.
STRUCTURES = {
    "iid": {"memoryless": 1.0, "spread": 0.0, "depth": 0.0},
    "chain": {"memoryless": 0.0, "spread": 0.0, "depth": 0.0},
    "chain+depth": {"memoryless": 0.0, "spread": 0.0, "depth": 1.0},
    "spread": {"memoryless": 0.0, "spread": 1.0, "depth": 0.0},
    "spread+depth": {"memoryless": 0.0, "spread": 1.0, "depth": 1.0},
}
#: The free parameters each structure uses (what its convergence is judged on).
STRUCTURE_PARAMETERS = {
    "iid": ["logit_persistence"],
    "chain": ["logit_persistence", "logit_stay_unguessable"],
    "chain+depth": ["logit_persistence", "logit_stay_unguessable", "depth_decay"],
    "spread": ["logit_persistence", "logit_stay_unguessable", "persistence_spread"],
    "spread+depth": ["logit_persistence", "logit_stay_unguessable", "persistence_spread",
                     "depth_decay"],
}
#: Proposers that copy earlier text (no model of their own, no error that grows with
#: the depth): matched by name in the drafter or method label.
COPYING_PROPOSERS = ("ngram", "n-gram", "prompt_lookup", "prompt-lookup", "lookup",
                     "suffix", "pld")


def default_structure(labels: dict) -> str:
    """The structure for a setup measured at one k: ``spread`` for a copying proposer
    (n-gram, prompt lookup, suffix decoding), ``spread+depth`` for a trained drafter."""
    text = " ".join(str(labels.get(c, "")) for c in ("drafter", "method")).lower()
    return "spread" if any(name in text for name in COPYING_PROPOSERS) else "spread+depth"


# ----------------------------------------------------------------------------- windows

def counter_windows(counters: pd.DataFrame) -> dict:
    """The windows of :func:`bayesspec.data.read_counters` grouped into setups.

    Per window: ``setup`` (index), ``k``, ``drafts`` (NaN where a table gave none) and
    ``counts`` (W, max_k + 1): the drafts that accepted exactly a = 0..k tokens (0
    beyond k, and all 0 on a window of totals alone), ``inside`` (a <= k),
    ``has_positions``, and the totals every window has: ``accepted_mean`` (accepted
    drafts per draft), ``inv_drafts`` (1 / num_drafts, 0 where unknown) and
    ``resolution`` (the reported digit of an acceptance length without counts, else 0);
    per setup: ``setups`` (labels), ``labels`` (dicts), ``k_measured``. Two windows
    share a setup only when every label column they carry is equal.
    """
    label_columns = [c for c in COUNTER_LABEL_COLUMNS if c in counters.columns]
    keys = counters[label_columns].astype(object).where(counters[label_columns].notna(), None)
    tuples = [tuple(row) for row in keys.itertuples(index=False, name=None)]
    order: dict[tuple, int] = {}
    setup = np.array([order.setdefault(t, len(order)) for t in tuples], dtype=int)
    labels = [dict(zip(label_columns, key)) for key in order]
    k = counters["k"].to_numpy(int)
    max_k = int(k.max())
    drafts = counters["num_drafts"].to_numpy(float)
    has_positions = (counters["has_positions"].to_numpy(bool)
                     if "has_positions" in counters.columns else np.ones(len(k), bool))
    positions = np.stack([counters[POSITION_COUNT_COLUMN.format(i)].to_numpy(float)
                          if POSITION_COUNT_COLUMN.format(i) in counters.columns
                          else np.zeros(len(counters)) for i in range(1, max_k + 1)], axis=1)
    inside = np.arange(max_k + 1)[None, :] <= k[:, None]
    at_least = np.concatenate([np.nan_to_num(drafts)[:, None], positions,
                               np.zeros((len(k), 1))], axis=1)
    at_least = np.where(np.arange(max_k + 2)[None, :] <= k[:, None], at_least, 0.0)
    counts = np.where(inside & has_positions[:, None], at_least[:, :-1] - at_least[:, 1:], 0.0)
    if "accepted_mean" in counters.columns:
        accepted_mean = counters["accepted_mean"].to_numpy(float)
        resolution = counters["resolution"].to_numpy(float)
    else:
        accepted_mean = (counts * np.arange(max_k + 1)).sum(axis=1) / drafts
        resolution = np.zeros(len(k))
    with np.errstate(divide="ignore"):
        inv_drafts = np.where(np.isfinite(drafts) & (drafts > 0), 1.0 / drafts, 0.0)
    return {"setup": setup, "setups": [setup_label(lab) for lab in labels],
            "labels": labels, "k": k, "drafts": drafts, "counts": counts, "inside": inside,
            "max_k": max_k, "has_positions": has_positions, "accepted_mean": accepted_mean,
            "inv_drafts": inv_drafts, "resolution": resolution,
            "k_measured": [sorted(set(k[setup == s].tolist())) for s in range(len(labels))],
            "data_rows": list(counters.attrs.get("data_rows", range(1, len(k) + 1)))}


def setup_label(labels: dict) -> str:
    """'Llama-3.1-8B + EAGLE3' and the other labels a setup carries."""
    text = f"{labels.get('verifier') or 'model'}"
    if labels.get("drafter"):
        text += f" + {labels['drafter']}"
    extra = [f"{c}={labels[c]:g}" if isinstance(labels[c], float) else f"{c}={labels[c]}"
             for c in COUNTER_LABEL_COLUMNS if c not in ("verifier", "drafter")
             and c in labels and labels[c] not in (None, "")
             and not (isinstance(labels[c], float) and np.isnan(labels[c]))]
    return text + (f" ({', '.join(extra)})" if extra else "")


def replicated_setups(windows: dict) -> np.ndarray:
    """Per setup: True when some k has more than one window (the scatter between windows
    can then be measured: a Dirichlet-multinomial with a learned concentration)."""
    out = np.zeros(len(windows["setups"]), dtype=bool)
    counted = windows.get("has_positions", np.ones(len(windows["k"]), bool))
    for s in range(len(out)):
        ks = windows["k"][(windows["setup"] == s) & counted]
        out[s] = len(ks) > len(set(ks.tolist()))
    return out


def measured_depths(windows: dict) -> np.ndarray:
    """Per setup, the deepest draft position its windows measured (its largest k)."""
    return np.array([max(ks) for ks in windows["k_measured"]], dtype=float)


def position_counted(windows: dict, n_setups: int | None = None) -> np.ndarray:
    """Per setup, whether every window of it has per-position counters. Such a setup's
    trained depth is at or past its deepest measured position D: its counts fit the
    shape of every measured position, and a trained depth inside them made its fits
    diverge and run 13 times as long."""
    setup = np.asarray(windows["setup"], dtype=int)
    has = np.asarray(windows["has_positions"], dtype=bool)
    count = int(setup.max()) + 1 if n_setups is None else int(n_setups)
    return np.array([bool(np.any(setup == s)) and bool(has[setup == s].all())
                     for s in range(count)])


# ----------------------------------------------------------------------------- joint use

def token_windows_of(groups: pd.DataFrame, counters: dict, counter_group: np.ndarray,
                     n_setups: int, source=None) -> dict:
    """The counter windows of a speculative model's SD groups, as
    :func:`counter_windows` reads them for ``acceptance``: every row with complete
    per-position counters is a window of its group's setup, and so is every row with
    totals alone (accepted tokens with num_drafts or draft_tokens) or a reported
    acceptance length. ``counters``: the model's ``_counter_totals``; every SD group
    needs at least one window."""
    from bayesspec.data.counters import reported_resolution

    is_sd = groups["is_sd"].to_numpy(bool)
    setup_of_group = groups["setup_index"].to_numpy(int)
    counted = counters["valid"] | counters["reported"]
    usable = counted & (counter_group >= 0)
    usable &= is_sd[np.maximum(counter_group, 0)]
    lacking = [g for g in np.flatnonzero(is_sd) if not (usable & (counter_group == g)).any()]
    if lacking:
        raise BadInput(f"acceptance_law=token needs acceptance counters (num_drafts with "
                       f"accepted_tokens_pos1..k or accepted_tokens, or acceptance_length) "
                       f"on the SD group '{groups['label'].iloc[lacking[0]]}'",
                       file=source, column="accepted_tokens")
    rows = np.flatnonzero(usable)
    k = counters["k"][rows].astype(int)
    max_k = int(k.max())
    by_position = counters["complete"][rows]
    drafts = np.where(counters["valid"][rows], counters["drafts"][rows], np.nan)
    positions = np.nan_to_num(counters["positions"][rows, :max_k])
    at_least = np.concatenate([np.nan_to_num(drafts)[:, None], positions,
                               np.zeros((len(rows), 1))], axis=1)
    at_least = np.where(np.arange(max_k + 2)[None, :] <= k[:, None], at_least, 0.0)
    inside = np.arange(max_k + 1)[None, :] <= k[:, None]
    counts = np.where(inside & by_position[:, None], at_least[:, :-1] - at_least[:, 1:], 0.0)
    from_counts = counters["valid"][rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        accepted_mean = np.where(from_counts, counters["accepted"][rows] / drafts,
                                 counters["length"][rows] - 1.0)
        inv_drafts = np.where(from_counts, 1.0 / drafts, 0.0)
    resolution = np.array([0.0 if c else reported_resolution(float(v))
                           for c, v in zip(from_counts, counters["length"][rows])])
    setup = setup_of_group[counter_group[rows]]
    replicated = np.zeros(n_setups, dtype=bool)
    depth = np.ones(n_setups)
    for s in range(n_setups):
        ks = k[(setup == s) & by_position]
        replicated[s] = len(ks) > len(set(ks.tolist()))
        if (setup == s).any():
            depth[s] = k[setup == s].max()
    return {"setup": setup, "k": k, "counts": np.round(counts), "inside": inside,
            "max_k": max_k, "replicated": replicated, "rows": rows,
            "has_positions": by_position, "accepted_mean": accepted_mean,
            "inv_drafts": inv_drafts, "resolution": resolution, "measured_depth": depth}
