"""Did the new engine version change my latency costs? An end-to-end example.

    python examples/compare_engine_versions.py [--workdir DIR]

1. Simulates GuideLLM sweeps of Qwen3-8B on an H100 at four (prefill, decode) pairs for
   two "engine versions": A (defaults) and B, whose attention kernel reads the KV cache
   at 85% of A's bandwidth (a regression that raises the load cost C2, not C1).
2. Writes them as GuideLLM v2 JSON reports, as the real tool would.
3. `bayesspec ingest` -> `bayesspec fit` for each version -> `bayesspec compare A B`.
"""

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bayesspec.simulate import setup, sweep
from bayesspec.simulate.report import write_guidellm_json
from bayesspec.simulate.stepmodel import RooflineParams

parser = argparse.ArgumentParser()
parser.add_argument("--workdir", default="compare-out")
args = parser.parse_args()
work = Path(args.workdir)
work.mkdir(exist_ok=True)

versions = {"A": RooflineParams(),
            "B": replace(RooflineParams(), kv_bandwidth_efficiency=0.85)}
lengths = [(256, 256), (512, 512), (1024, 256), (1024, 1024)]


def run(*argv):
    print("$ bayesspec " + " ".join(argv), flush=True)
    return subprocess.run([sys.executable, "-m", "bayesspec", *argv], check=True,
                          capture_output=True, text=True).stdout


for version, params in versions.items():
    reports = []
    for prefill, decode in lengths:
        result = sweep(setup("Qwen3-8B", "H100", prefill=prefill, decode=decode,
                             roofline_params=params), 9, n_requests=600, seed=prefill + decode)
        path = work / f"guidellm_{version}_{prefill}_{decode}.json"
        write_guidellm_json(path, result)
        reports.append(str(path))
    # The reports carry the simulator's own version label; the two builds are told apart
    # by file here, so no --engine-version (it would conflict with the file's value).
    run("ingest", *reports, "-o", str(work / f"sweeps_{version}.csv"), "--verifier", "Qwen3-8B")
    run("fit", str(work / f"sweeps_{version}.csv"), "-o", str(work / f"fit_{version}.nc"),
        "--seed", "1", "--quiet")

document = json.loads(run("compare", str(work / "fit_A.nc"), str(work / "fit_B.nc"), "--json",
                          "--plot", str(work / "compare_forest.png")))
for name in ("C1", "C2"):
    entry = document["parameters"][name]
    ratio = entry["ratio"]
    print(f"{name} B/A: {ratio['median']:.3f} [{ratio['lo']:.3f}, {ratio['hi']:.3f}], "
          f"P(increase) {entry['p_increase']:.3f}: {entry['verdict']}")
print("verdict:", document["verdict"])
