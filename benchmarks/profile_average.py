"""Does the decode profile's Poisson average stand for the decode iteration requests
really meet? Extrapolation from a sweep's lower rates with each (issue 34).

    R=$(awk -F, '$1=="Llama-2-70B" && $19=="A100" && $5==512 && $6==512 \
        {printf "%s%s", s, $9; s=","}' examples/vidur/vidur_dense.csv)
    VIDUR_PREDICTOR_CACHE=.vidur/cache-decode-dense .vidur/venv/bin/python \
        examples/vidur/iteration_profile.py --model meta-llama/Llama-2-70b-hf --device a100 \
        --tp 4 --prefill 512 --decode 512 --threads 2 --rates $R --json a100_512_512.json
    python benchmarks/profile_average.py a100_512_512.json --verifier Llama-2-70B \
        --gpu A100 --prefill 512 --decode 512

A line L - shift = C1 + C2 N is fitted by least squares to the logged run's points up to
60% of its top rate, with the shift either the law's (the profile averaged over a Poisson
number beside the request, :func:`bayesspec.laws.decode_profile_shift`) or the one the
run's requests met ((decode - 1) x (their mean decode iteration - t_d(1)), logged by
Vidur); printed are the relative errors at the higher rates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.laws import decode_profile_shift

ROOT = Path(__file__).resolve().parent.parent / "examples" / "vidur"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an iteration_profile.py --json output")
    parser.add_argument("--set", default="dense")
    parser.add_argument("--verifier", required=True)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--prefill", type=int, required=True)
    parser.add_argument("--decode", type=int, required=True)
    parser.add_argument("--cap", type=float, default=128.0)
    args = parser.parse_args()
    profiles = pd.read_csv(ROOT / "decode_profiles.csv")
    profile = profiles[(profiles["set"] == args.set) & (profiles["verifier"] == args.verifier)
                       & (profiles["gpu"] == args.gpu)
                       & (profiles["prefill_tokens"] == args.prefill)
                       & (profiles["decode_tokens"] == args.decode)]
    sizes = profile["batch_size"].to_numpy(float)
    times = profile["decode_iteration_s"].to_numpy(float)
    points = json.load(open(args.run))["points"]
    n = np.array([p["little_n"] for p in points])
    latency = np.array([p["latency_mean_s"] for p in points])
    rps = np.array([p["rps"] for p in points])
    met = np.array([p["decode_iter_ms"] for p in points]) / 1e3
    fitted = rps <= 0.6 * rps.max()
    print(f"{args.verifier} {args.gpu} ({args.prefill},{args.decode}): error above 60% of "
          f"the top rate, N = {', '.join(f'{v:.0f}' for v in n[~fitted])}")
    for name, shift in (("profile, Poisson average",
                         decode_profile_shift(n, args.decode, sizes, times, args.cap)),
                        ("decode iteration the requests met",
                         (args.decode - 1) * (met - times[0]))):
        design = np.c_[np.ones(len(n)), n]
        coefficients, *_ = np.linalg.lstsq(design[fitted], (latency - shift)[fitted],
                                           rcond=None)
        error = latency / (design @ coefficients + shift) - 1.0
        print(f"  {name:34s} C1 {coefficients[0]:7.3f} C2 {coefficients[1]:.4f}  "
              + " ".join(f"{100 * e:+.2f}%" for e in error[~fitted]))


if __name__ == "__main__":
    main()
