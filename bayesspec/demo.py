"""``bayesspec demo``: the main job end to end on the bundled dataset.

Reads the bundled sweeps, fits the dense latency law with partial pooling, checks
convergence, writes the fit file, a summary, and the figures, and prints what a serving
engineer would read first: per group, the batch-1 latency C1, the marginal cost C2 and
the saturation rate, each with its interval.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from . import datasets
from .data import read_tidy
from .errors import BadInput
from .inference import SamplerSettings


def _say(message: str, quiet: bool) -> None:
    print(message, file=sys.stderr if quiet else sys.stdout, flush=True)


def run_demo(*, out: str = "demo-out", quick: bool = False, as_json: bool = False,
             seed: int = 2026) -> int:
    from .cli import _clean, write_text_atomic
    from .plots import collapse_plot, group_fit_plots, save_figure
    from .reports import summary_document, summary_text
    from .workflow import fit

    started = time.perf_counter()
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise BadInput("exists and is not a folder", file=str(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)

    source = datasets.path("dense")
    data = read_tidy(source)
    excluded = int(data["excluded"].sum())
    _say(f"bundled dataset: {source.name}: {len(data)} load points, "
         f"{data['verifier'].nunique()} verifiers, {excluded} saturated points excluded",
         as_json)
    settings = SamplerSettings(draws=300 if quick else 1000, tune=300 if quick else 1000,
                               chains=4, seed=seed, progress=True)
    result = fit(data, "dense", settings=settings)
    fit_path = out_dir / "dense_fit.nc"
    result.save(fit_path)

    document = summary_document(result)
    diag = result.diagnostics
    if not diag["converged"]:
        document["warning"] = "posterior did not converge: " + "; ".join(diag["problems"])
    write_text_atomic(out_dir / "summary.json", json.dumps(_clean(document), indent=2) + "\n")
    figures = [save_figure(collapse_plot(result), out_dir / "collapse.png")]
    for i, figure in enumerate(group_fit_plots(result), start=1):
        figures.append(save_figure(figure, out_dir / f"group_fits_{i}.png"))

    elapsed = time.perf_counter() - started
    if as_json:
        from .cli import emit_json

        emit_json({"fit": str(fit_path), "summary": str(out_dir / "summary.json"),
                   "figures": figures, "seconds": round(elapsed, 1),
                   "diagnostics": document["diagnostics"],
                   **({"warning": document["warning"]} if "warning" in document else {})})
        return 0
    print()
    print(summary_text(result, document))
    print()
    if diag["converged"]:
        print("Every group follows L = C1/(1 - RPS*C2) (see collapse.png); the saturation "
              "rate 1/C2 is the per-instance ceiling: plan load below it.")
    else:
        print("WARNING: the posterior did not converge; do not act on these numbers.")
    print(f"wrote {fit_path}, {out_dir / 'summary.json'} and {len(figures)} figures to "
          f"{out_dir}/ in {elapsed:.0f} s")
    print(f"next: bayesspec predict {fit_path} --rps 1:20:1 --verifier Qwen3-8B "
          f"--prefill 512 --decode 512")
    return 0
