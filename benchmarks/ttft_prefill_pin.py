"""C2 pinned by the prompt's prefill time read off the lightest point's TTFT (issue 34),
tried by least squares and not built: does a measured stall per arrival carry the
decode-profile law further above the fitted rates?

    python benchmarks/ttft_prefill_pin.py            # every set; chosen on fresh

vidur_fresh's small and prefill-heavy groups are under-predicted above 60% of their top
rate because C2, the stall each arrival's prefill puts on the running batch, comes out
low from whole runs (benchmarks/README.md, 2026-12-05 morning). A load test already
measures the prefill: at the lightest rate a request's TTFT is its prefill iteration
plus the wait for the iteration running when it arrived. With iterations at fixed
lengths that wait is half an iteration times the share of time the engine is busy with
one: t_p = TTFT - (1 - e^-N - RPS t_p) t_d(N)/2 - RPS t_p^2/2, N the lightest point's
mean concurrency (Poisson: idle with probability e^-N), t_d the decode profile's
iteration at N. Solved by fixed-point iteration.

Per group the script prints t_p, C2 of least squares on every point (the law without the
cap's wait, as ``finite_run.py``), C2 of least squares below 60% of the top rate, and
the held-out error at the higher rates whose N stays below 0.8 of the cap, with C2 free
and with C2 fixed at t_p (C1 alone fitted), each the largest in the group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayesspec.laws import profile_segments

from slot_queue_choice import law  # the script's folder is on the path
from vidur_sets import SETS, profiled_groups


def prefill_from_ttft(rps, ttft, in_flight, sizes, times, iterations=50):
    """The prefill iteration's seconds for one prompt, from the lightest point's TTFT."""
    decode_step = float(np.interp(max(in_flight, 1.0), sizes, times))
    prefill = ttft
    for _ in range(iterations):
        busy_prefill = rps * prefill
        busy_decode = max(1.0 - np.exp(-in_flight) - busy_prefill, 0.0)
        prefill = ttft - busy_decode * decode_step / 2.0 - busy_prefill * prefill / 2.0
    return prefill


def fitted_costs(rps, measured, pieces, cap, mask, c2=None, start_c2=0.01):
    """(C1, C2) of least squares in log L on the points ``mask``; C2 fixed when given."""
    def residual(theta):
        c1 = np.exp(theta[0])
        slope = c2 if c2 is not None else np.exp(theta[1])
        value = law("none", rps[mask], c1, slope, pieces, cap, 1.0)
        finite = np.isfinite(value)
        return np.where(finite, np.log(measured[mask]) - np.log(np.where(finite, value, 1.0)),
                        10.0)

    start = [np.log(measured.min())] + ([] if c2 is not None else [np.log(start_c2)])
    theta = least_squares(residual, start).x
    return np.exp(theta[0]), (c2 if c2 is not None else np.exp(theta[1]))


def main() -> None:
    rows = []
    for set_name in SETS:
        for key, group, sizes, times, cap in profiled_groups(set_name):
            pieces = profile_segments(float(key[4]), sizes, times, cap)
            rps = group["rps"].to_numpy(float)
            measured = group["latency_mean_s"].to_numpy(float)
            prefill = prefill_from_ttft(rps[0], float(group["ttft_mean_s"].iloc[0]),
                                        float(group["mean_concurrency"].iloc[0]), sizes, times)
            fitted = rps <= 0.6 * rps.max()
            tested = ~fitted & (rps * measured < 0.8 * cap)
            every = fitted_costs(rps, measured, pieces, cap, np.ones(len(rps), bool),
                                 start_c2=0.8 * prefill)
            free = fitted_costs(rps, measured, pieces, cap, fitted, start_c2=0.8 * prefill)
            pinned = fitted_costs(rps, measured, pieces, cap, fitted, c2=prefill)

            def largest_error(costs):
                if not tested.any():
                    return np.nan
                value = law("none", rps, *costs, pieces, cap, 1.0)
                error = measured[tested] / value[tested] - 1.0
                return float(error[np.argmax(np.abs(error))])

            rows.append({"set": set_name,
                         "group": f"{key[0]} {key[1]} ({key[3]},{key[4]})",
                         "t_p from TTFT": prefill, "C2 every point": every[1],
                         "C2 below 0.6": free[1],
                         "C2 every point / t_p": every[1] / prefill,
                         "error, C2 free": largest_error(free),
                         "error, C2 = t_p": largest_error(pinned)})
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200):
        print(table.round(4).to_string(index=False))
    print("\nper set: median C2/t_p; median |largest held-out error| with C2 free, C2 = t_p")
    for set_name, part in table.groupby("set", sort=False):
        print(f"  {set_name}: {part['C2 every point / t_p'].median():.3f}; "
              f"{part['error, C2 free'].abs().median():.4f}, "
              f"{part['error, C2 = t_p'].abs().median():.4f}")


if __name__ == "__main__":
    main()
