"""Summarise an end-to-end run (examples/guidellm_e2e.sh): the figures for the note.

Reads OUT/{dense,offline_dense,sd}.summary.json, speedup.json, crossover.json,
{dense,sd}.server.json and sd.csv; writes OUT/e2e_summary.json and prints a short report:
wall time, real vs simulated step time, live vs offline dense C1/C2 (each median inside
the other's 90% interval?), the alpha estimated from the scraped counters vs the forced
one. Usage: python summarize.py OUT FORCED_ALPHA WALL_S LIVE_S
"""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def _load(path: Path):
    return json.loads(path.read_text())


def _one_group(doc: dict, what: str) -> dict:
    groups = doc["groups"]
    if len(groups) != 1:
        sys.exit(f"{what}: expected one group, found {len(groups)}")
    return groups[0]


def _inside(value: float, u: dict) -> bool:
    return u["lo"] <= value <= u["hi"]


def _cell(u: dict) -> str:
    return f"{u['median']:.4g} [{u['lo']:.4g}, {u['hi']:.4g}]"


def main(out: str, forced_alpha: float, wall_s: int, live_s: int) -> None:
    out = Path(out)
    live = _one_group(_load(out / "dense.summary.json"), "live dense fit")
    offline = _one_group(_load(out / "offline_dense.summary.json"), "offline dense fit")
    sd = _load(out / "sd.summary.json")
    alpha_keys = [k for k in sd["coefficients"] if k.startswith("alpha_latent")]
    alpha = sd["coefficients"][alpha_keys[0]] if alpha_keys else None
    counters = pd.read_csv(out / "sd.csv")
    used = counters[~counters["saturated"].astype(bool)] if "saturated" in counters else counters
    drafts = float(counters["num_drafts"].sum())
    accepted = float(counters["accepted_tokens"].sum())
    pos1 = float(counters["accepted_tokens_pos1"].sum()) if "accepted_tokens_pos1" in counters \
        else float("nan")
    # Per-position rate of position 1 is alpha itself under i.i.d. acceptance; its
    # binomial 90% interval is a check that needs no model.
    p = pos1 / drafts if drafts else float("nan")
    half = 1.645 * np.sqrt(p * (1 - p) / drafts) if drafts else float("nan")
    servers = {name: _load(out / f"{name}.server.json") for name in ("dense", "sd")}
    checks = {
        "offline_C1_in_live_interval": _inside(offline["C1"]["median"], live["C1"]),
        "offline_C2_in_live_interval": _inside(offline["C2"]["median"], live["C2"]),
        "live_C1_in_offline_interval": _inside(live["C1"]["median"], offline["C1"]),
        "live_C2_in_offline_interval": _inside(live["C2"]["median"], offline["C2"]),
        "alpha_interval_covers_forced": bool(alpha and _inside(forced_alpha, alpha)),
    }
    summary = {
        "wall_s": wall_s,
        "live_sweeps_s": live_s,
        "servers": servers,
        "dense_live": {"C1": live["C1"], "C2": live["C2"],
                       "saturation_rps": live["saturation_rps"]},
        "dense_offline": {"C1": offline["C1"], "C2": offline["C2"],
                          "saturation_rps": offline["saturation_rps"]},
        "dense_live_diagnostics": _load(out / "dense.summary.json")["diagnostics"],
        "sd_diagnostics": sd["diagnostics"],
        "forced_alpha": forced_alpha,
        "alpha_latent": alpha,
        "alpha_position1_rate": {"estimate": p, "lo": p - half, "hi": p + half,
                                 "drafts": drafts, "accepted": accepted},
        "sd_rows_used": int(len(used)),
        "speedup": _load(out / "speedup.json"),
        "crossover": _load(out / "crossover.json"),
        "checks": checks,
    }
    (out / "e2e_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        f"wall time {wall_s} s (live sweeps {live_s} s)",
    ]
    for name, s in servers.items():
        lines.append(f"{name} server: {s['steps']} steps, simulated {s['simulated_step_s_total']:.1f} s, "
                     f"real {s['real_step_s_total']:.1f} s, drift {100 * s['drift']:+.2f}%, "
                     f"mean |step error| {100 * s['mean_abs_step_error_rel']:.1f}%, "
                     f"lateness p50/p99 {s['lateness_ms_p50']:.1f}/{s['lateness_ms_p99']:.1f} ms, "
                     f"clock resets {s['clock_resets']}")
    lines += [
        f"dense C1 live {_cell(live['C1'])} s vs offline {_cell(offline['C1'])} s",
        f"dense C2 live {_cell(live['C2'])} s vs offline {_cell(offline['C2'])} s",
        f"alpha (latent, from counters) {_cell(alpha) if alpha else 'n/a'} vs forced {forced_alpha}",
        f"alpha (position-1 rate, {drafts:.0f} drafts) {p:.4f} [{p - half:.4f}, {p + half:.4f}]",
        f"crossover: {json.dumps(summary['crossover'])[:300]}",
        "checks: " + ", ".join(f"{k}={v}" for k, v in checks.items()),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
