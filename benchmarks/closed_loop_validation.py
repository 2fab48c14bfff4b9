"""Validation: closed-loop sweeps (a fixed number of clients in flight) fitted and answered
on the concurrency axis.

    nice -n 10 python benchmarks/closed_loop_validation.py simulator --replicates 20 \
        --kstar-replicates 3 --json closed_loop_sim.json    # about 10 min, warm compile caches
    nice -n 10 python benchmarks/closed_loop_validation.py public --json closed_loop_public.json
    nice -n 10 python benchmarks/closed_loop_validation.py little                # about 1 min

``simulator``: bayesspec's serving simulator (not the law), Llama-3.1-8B on an H100 with
its EAGLE-3 head at alpha 0.7, prompts 512 / outputs 256 tokens, a batch cap of 64
(max_num_seqs), swept as ``vllm bench serve --max-concurrency C`` sweeps are: closed
loops of C = 1 .. 128 clients (past the cap), k = 0..6, 300 requests per point (at least
20 per client). The files keep what a vLLM user knows (``max_num_seqs``) and drop the
simulator's own ``saturated`` marks, so the data layer's rules alone set points aside.
Per replicate (seeds 0..R-1, the data tested on):

- which points are set aside: none at or below the cap may be (the throughput plateau
  starts at the cap); the same file without ``max_num_seqs`` shows the plateau rule
  (a throughput that stops rising) alone;
- the dense model (each k its own C1, C2: the fastest fit whose parameters are C1 and C2)
  and whether the 90% intervals cover the truth. The truth (chosen on other seeds: 10_000
  + k) is the simulator's own closed-loop law: L = C1 + C2 N fitted by least squares to
  long runs (3,000 requests per level) at every level up to the cap;
- for the first ``--kstar-replicates``, the speculative model (six cycle coefficients)
  and ``bayesspec kstar --alpha 0.7 --concurrency ...``: the k it picks per level against
  the simulator's best k (lowest long-run latency), and where they differ, the chosen
  k's long-run latency over the best one's.

``little``: Little's law in the simulator's closed-loop windows, mean in flight /
(rps x mean latency), over four servers (fixed and log-normal lengths, k 0 and 3, batch
caps 64 to 1024), C = 1 .. 256, 1,000 requests per point, 3 seeds each.

``public``: the vLLM-Omni nightly perf artifacts in
``shared/data/public/vllm_omni_nightly_qwen3omni_text_2builds`` (Qwen3-Omni-30B-A3B, text
path, 2,500 / 900 tokens, closed loops of C = 1, 4, 8, 16, 32, two consecutive nightly
builds), mapped to tidy columns as its README describes (``examples/
closed_loop_vllm_omni.csv``): what is set aside, the fit per build, and ``bayesspec
compare`` of the two builds. Nothing was chosen on these data; they are only tested on.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.bayes.workflow import fit
from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.simulate import at_concurrency, setup

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
CAP = 64
KS = tuple(range(7))
ALPHA = 0.7
VERIFIER, PREFILL, DECODE = "Llama-3.1-8B-Instruct", 512, 256
# the public data sets sit beside the repository (shared/data/public/)
PUBLIC = (ROOT.parent / "shared" / "data" / "public" / "vllm_omni_nightly_qwen3omni_text_2builds"
          / "latency_vs_concurrency_two_builds.csv")
PUBLIC_CSV = ROOT / "examples" / "closed_loop_vllm_omni.csv"


def server(k: int):
    return setup(VERIFIER, "H100", k=k, alpha=ALPHA if k else None, prefill=PREFILL,
                 decode=DECODE, max_num_seqs=CAP)


def sweep_rows(seed: int, requests: int = 300, levels=LEVELS) -> pd.DataFrame:
    rows = pd.concat([at_concurrency(server(k), levels, n_requests=requests,
                                     seed=seed).rows for k in KS], ignore_index=True)
    return rows.drop(columns=["saturated", "saturation_reason"])


def truth(requests: int = 3000) -> dict:
    """Per k: (C1, C2) of the least-squares line through long runs up to the cap, and the
    long-run mean latency at every level."""
    out = {}
    for k in KS:
        rows = at_concurrency(server(k), LEVELS, n_requests=requests, seed=10_000 + k).rows
        latency = rows["latency_mean_s"].to_numpy(float)
        levels = np.asarray(LEVELS, float)
        below = levels <= CAP
        c2, c1 = np.polyfit(levels[below], latency[below], 1)
        out[k] = {"C1": float(c1), "C2": float(c2), "latency": latency.tolist(),
                  "line_rel_error_max": float(np.max(np.abs(
                      (c1 + c2 * levels[below]) / latency[below] - 1)))}
    return out


def set_aside(rows: pd.DataFrame) -> dict:
    prepared = prepare(rows)
    below = prepared["max_concurrency"].astype(float) <= CAP
    without_cap = prepare(rows.drop(columns=["max_num_seqs", "kv_cache_tokens"]))
    return {"below_cap_set_aside": int(prepared.loc[below, "excluded"].sum()),
            "past_cap_set_aside": int(prepared.loc[~below, "excluded"].sum()),
            "past_cap_points": int((~below).sum()),
            "no_limits_below_cap_set_aside": int(without_cap.loc[below.to_numpy(),
                                                                 "excluded"].sum()),
            "no_limits_past_cap_set_aside": int(without_cap.loc[~below.to_numpy(),
                                                                "excluded"].sum())}


def coverage(result, true: dict) -> list[dict]:
    out = []
    for g in range(len(result.groups)):
        k = int(result.groups["k"].iloc[g])
        curve = result.group_curve(g)
        for name, draws in (("C1", np.ravel(curve.c1)), ("C2", np.ravel(curve.c2))):
            lo, hi = np.quantile(draws, [0.05, 0.95])
            value = true[k][name]
            out.append({"k": k, "coefficient": name, "truth": value, "lo": float(lo),
                        "hi": float(hi), "median": float(np.median(draws)),
                        "covered": bool(lo <= value <= hi)})
    return out


def cli_json(*argv) -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        code = main([*map(str, argv), "--json"])
    if code != 0:
        raise RuntimeError(f"bayesspec {' '.join(map(str, argv))} exited {code}")
    return json.loads(buffer.getvalue())


def kstar_check(rows: pd.DataFrame, true: dict, seed: int, folder: Path) -> dict:
    path = folder / f"spec_{seed}.nc"
    fitted = fit(prepare(rows), "speculative",
                 settings=SamplerSettings(seed=seed, progress=False))
    fitted.save(path)
    answer = cli_json("kstar", path, "--alpha", ALPHA, "--concurrency",
                      ",".join(map(str, LEVELS)), "--kmax", max(KS))
    latency = np.array([true[k]["latency"] for k in KS])            # (K, levels)
    rows_out = []
    for j, row in enumerate(answer["table"]):
        best = int(np.argmin(latency[:, j]))
        loss = float(latency[row["k"], j] / latency[best, j] - 1)
        rows_out.append({"concurrency": row["concurrency"], "k": row["k"],
                         "p_best": row["p_best"], "k_true": best, "latency_loss": loss,
                         "extrapolated": row["extrapolated"],
                         "ok": bool(row["k"] == best or loss <= 0.02)})
    return {"converged": fitted.diagnostics["converged"], "rows": rows_out,
            "matches": sum(r["k"] == r["k_true"] for r in rows_out),
            "within_2pct": sum(r["ok"] for r in rows_out), "levels": len(rows_out)}


def run_simulator(args) -> dict:
    started = time.time()
    true = truth()
    print("truth (per k: C1, C2, line's largest error up to the cap):")
    for k, t in true.items():
        print(f"  k {k}: C1 {t['C1']:.4f} s  C2 {t['C2']:.5f} s  "
              f"{t['line_rel_error_max']:.2%}")
    folder = Path(args.work)
    folder.mkdir(parents=True, exist_ok=True)
    replicates = []
    for r in range(args.first_replicate, args.first_replicate + args.replicates):
        rows = sweep_rows(r)
        aside = set_aside(rows)
        dense = fit(prepare(rows), "dense",
                    settings=SamplerSettings(seed=r, progress=False))
        covered = coverage(dense, true)
        entry = {"replicate": r, "set_aside": aside, "coverage": covered,
                 "converged": dense.diagnostics["converged"]}
        if r - args.first_replicate < args.kstar_replicates:
            entry["kstar"] = kstar_check(rows, true, r, folder)
        replicates.append(entry)
        share = {name: np.mean([c["covered"] for c in covered if c["coefficient"] == name])
                 for name in ("C1", "C2")}
        extra = (f"; k* {entry['kstar']['matches']}/{entry['kstar']['levels']} match, "
                 f"{entry['kstar']['within_2pct']} within 2%" if "kstar" in entry else "")
        print(f"replicate {r}: set aside below/past cap {aside['below_cap_set_aside']}/"
              f"{aside['past_cap_set_aside']} of {aside['past_cap_points']} past "
              f"(no limits in the file: {aside['no_limits_below_cap_set_aside']}/"
              f"{aside['no_limits_past_cap_set_aside']}); covered C1 {share['C1']:.2f} "
              f"C2 {share['C2']:.2f}; converged {entry['converged']}{extra}  "
              f"[{time.time() - started:.0f} s]", flush=True)
    every = [c for e in replicates for c in e["coverage"]]
    summary = {name: float(np.mean([c["covered"] for c in every if c["coefficient"] == name]))
               for name in ("C1", "C2")}
    summary["intervals"] = len(every)
    summary["below_cap_set_aside"] = sum(e["set_aside"]["below_cap_set_aside"]
                                         for e in replicates)
    summary["converged"] = sum(e["converged"] for e in replicates)
    print(f"coverage of the 90% intervals over {len(replicates)} replicates x {len(KS)} "
          f"groups: C1 {summary['C1']:.3f}, C2 {summary['C2']:.3f}; points at or below the "
          f"cap set aside: {summary['below_cap_set_aside']}; converged "
          f"{summary['converged']}/{len(replicates)}")
    return {"truth": true, "replicates": replicates, "summary": summary,
            "seconds": time.time() - started}


def run_little(args) -> dict:
    worst = []
    for verifier, k, dist, cap in (("Llama-3.1-8B-Instruct", 0, "fixed", 64),
                                   ("Llama-3.1-8B-Instruct", 3, "lognormal", 64),
                                   ("Qwen3-8B", 0, "fixed", 1024), ("Qwen3-8B", 3, "fixed", 128)):
        s = setup(verifier, "H100", k=k, alpha=ALPHA if k else None, prefill=512, decode=512,
                  length_dist=dist, length_cv=0.5 if dist != "fixed" else 0.0,
                  max_num_seqs=cap)
        for seed in range(3):
            rows = at_concurrency(s, [1, 4, 16, 32, 64, 128, 256], n_requests=1000,
                                  seed=seed).rows
            ratio = rows["mean_concurrency"] / (rows["rps"] * rows["latency_mean_s"])
            worst.append(float(np.max(np.abs(ratio - 1))))
            print(f"{verifier} k {k} {dist} cap {cap} seed {seed}: "
                  + " ".join(f"{v:.4f}" for v in ratio))
    print(f"largest |ratio - 1| over {len(worst)} sweeps: {max(worst):.2e}")
    return {"worst": worst}


def public_rows() -> pd.DataFrame:
    """The two builds' points as tidy rows (the README's mapping)."""
    src = pd.read_csv(PUBLIC)
    return pd.DataFrame({
        "verifier": "Qwen3-Omni-30B-A3B-Instruct", "prefill_tokens": 2500,
        "decode_tokens": 900, "k": 0, "gpu": "H100", "engine": "vllm-omni",
        "engine_version": "nightly-" + src["build"].astype(str),
        "experts_active": 8, "experts_total": 128,
        "max_concurrency": src["max_concurrency"], "n_requests": src["num_prompts"],
        "rps": src["request_throughput_rps"],
        "latency_mean_s": src["mean_e2el_ms"] / 1000,
        "latency_p50_s": src["median_e2el_ms"] / 1000,
        "latency_p99_s": src["p99_e2el_ms"] / 1000,
        "ttft_mean_s": src["mean_ttft_ms"] / 1000, "ttft_p99_s": src["p99_ttft_ms"] / 1000,
        "itl_mean_s": src["mean_itl_ms"] / 1000, "itl_p99_s": src["p99_itl_ms"] / 1000,
        "source": "vllm-omni-kanban-public " + src["source_path"].str.split("/").str[-1]})


def run_public(args) -> dict:
    rows = public_rows()
    if args.write_example:
        rows.to_csv(PUBLIC_CSV, index=False)
    prepared = prepare(rows)
    folder = Path(args.work)
    folder.mkdir(parents=True, exist_ok=True)
    out = {"set_aside": int(prepared["excluded"].sum()), "builds": {}}
    print(f"points set aside: {out['set_aside']} of {len(prepared)}")
    paths = []
    for build, part in rows.groupby("engine_version"):
        path = folder / f"omni_{build}.nc"
        result = fit(prepare(part.reset_index(drop=True)), args.model,
                     settings=SamplerSettings(seed=0, progress=False))
        result.save(path)
        paths.append(path)
        answer = cli_json("predict", path, "--concurrency", "1,4,8,16,32")
        measured = part["latency_mean_s"].to_numpy(float)
        inside = [p["latency_s"]["lo"] <= m <= p["latency_s"]["hi"]
                  for p, m in zip(answer["points"], measured)]
        ratio = [p["latency_s"]["median"] / m - 1 for p, m in zip(answer["points"], measured)]
        out["builds"][build] = {"converged": result.diagnostics["converged"],
                                "relative_error": ratio, "mean_inside_interval": inside}
        print(f"{build}: {args.model} fit converged {result.diagnostics['converged']}; "
              "law / measured - 1 at C = 1, 4, 8, 16, 32: "
              + ", ".join(f"{v:+.1%}" for v in ratio))
    for name, argv in (("compare_fits", paths),
                       ("compare_by_version", [PUBLIC_CSV if PUBLIC_CSV.exists() else
                                               _written(rows, folder), "--by",
                                               "engine_version", "--seed", 0])):
        verdict = cli_json("compare", *argv)
        outcome = verdict.get("outcome")
        out[name] = {"outcome": outcome, "verdict": verdict.get("verdict"),
                     "outcome_text": verdict.get("outcome_text"),
                     "curve": verdict.get("curve"),
                     "C1": verdict["parameters"]["C1"]["ratio"],
                     "C2": verdict["parameters"]["C2"]["ratio"]}
        words = outcome.get("outcome") if isinstance(outcome, dict) else outcome
        print(f"{name}: outcome {words}; C1 B/A {_interval(out[name]['C1'])}, "
              f"C2 B/A {_interval(out[name]['C2'])}")
    return out


def _written(rows: pd.DataFrame, folder: Path) -> Path:
    path = folder / "omni.csv"
    rows.to_csv(path, index=False)
    return path


def _interval(u: dict) -> str:
    return f"{u['median']:.3f} [{u['lo']:.3f}, {u['hi']:.3f}]"


def main_cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("simulator", "public", "little"))
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--first-replicate", type=int, default=0)
    parser.add_argument("--kstar-replicates", type=int, default=3)
    parser.add_argument("--model", default="moe", help="public: the model fitted per build")
    parser.add_argument("--write-example", action="store_true",
                        help="public: also write examples/closed_loop_vllm_omni.csv")
    parser.add_argument("--work", default="closed_loop_work", help="folder for fit files")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    result = {"simulator": run_simulator, "public": run_public,
              "little": run_little}[args.part](args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main_cli())
