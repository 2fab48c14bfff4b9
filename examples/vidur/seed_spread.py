"""One Vidur sweep run again with other arrival seeds (vidur 0.0.26).

The bundled sweeps use arrival seed 0 at every rate: every point of a sweep meets the same
arrival pattern, scaled to its rate. Whatever that one pattern does to a run's mean (a
burst early on, a quiet end) is then shared by all of a sweep's points, not independent
noise. This reruns one setup's rates with other seeds, so the spread between seeds, and
where seed 0 sits in it, can be measured.

Usage (InternLM-20B A100 (1152,128) of vidur_fresh.csv):
  VIDUR_PREDICTOR_CACHE=.vidur/cache-decode-fresh .vidur/venv/bin/python \\
      examples/vidur/seed_spread.py --model internlm/internlm-20b --device a100 --tp 4 \\
      --prefill 1152 --decode 128 --seeds 0-7 --csv seeds.csv --rates $(awk -F, \\
      '$1=="InternLM-20B" && $5==1152 {printf "%s%s", s, $9; s=","}' \\
      examples/vidur/vidur_fresh.csv)
Output: one row per (seed, rate): rps, latency_mean_s, latency_p99_s, ttft_mean_s and
mean_concurrency_measured as run_point reports them, plus ``seed``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_point as rp  # noqa: E402  (imports vidur)

COLUMNS = ["seed", "rps_target", "rps", "latency_mean_s", "latency_p99_s", "ttft_mean_s",
           "mean_concurrency_measured", "n_requests"]


def seeds(text: str) -> list[int]:
    """``0-7`` or ``0,3,5``."""
    if "-" in text:
        first, last = (int(v) for v in text.split("-"))
        return list(range(first, last + 1))
    return [int(v) for v in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="a100")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--prefill", type=int, required=True)
    ap.add_argument("--decode", type=int, required=True)
    ap.add_argument("--rates", required=True, help="comma list of rps_target values")
    ap.add_argument("--seeds", default="0-7")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--batch-cap", type=int, default=128)
    ap.add_argument("--max-tokens-in-batch", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--root", default=rp.DEFAULT_ROOT)
    ap.add_argument("--csv", required=True)
    a = ap.parse_args()
    rates = [float(v) for v in a.rates.split(",")]
    with open(a.csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for seed in seeds(a.seeds):
            for rate in rates:
                res = rp.run_point(a.model, a.device, a.tp, a.prefill, a.decode, a.requests,
                                   rps_target=rate, seed=seed, root=a.root,
                                   threads=a.threads, batch_cap=a.batch_cap,
                                   max_tokens_in_batch=a.max_tokens_in_batch)
                row = {"seed": seed, "rps_target": rate, "n_requests": a.requests}
                row.update({k: res[k] for k in COLUMNS[1:] if k in res})
                writer.writerow(row)
                handle.flush()
                print(f"seed {seed} rate {rate:.4f}: L {res['latency_mean_s']:.4f} s, "
                      f"N {res['mean_concurrency_measured']:.1f}", flush=True)


if __name__ == "__main__":
    main()
