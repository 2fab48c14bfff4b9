"""The closed loop: measure, fit, plan, measure again, until the decision is settled or
the budget of load-test minutes is spent.

Each configuration is a live OpenAI-compatible endpoint (:class:`~bayesspec.loadtest.loadgen.Endpoint`)
or, with a launch template, a server started for it and stopped when the loop moves to
another configuration. A loop:

1. seed design per configuration that has none yet: a burst of requests all at once to
   find the ceiling (kept in the data as a saturated throughput point, not fitted), then
   constant rates at 20%, 45% and 70% of it;
2. fit (the model compiled once, refitted with the new rows: nutpie ``with_data``);
3. plan (:mod:`bayesspec.loadtest.planning`): settled -> stop; else run the top point that fits in
   the budget left;
4. write every load point as it lands: the whole points file rewritten atomically with
   the new row appended, so an interrupted loop resumes from it and loses nothing.

A configuration that cannot be reached stops the loop with
:class:`~bayesspec.loadtest.loadgen.Unreachable` after the points measured so far are saved.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec.errors import BadInput
from bayesspec.loadtest.loadgen import Endpoint, PointSpec, Unreachable, check_reachable, run_builtin
from bayesspec.data.write import write_table
from bayesspec.outputs import log

__all__ = ["TuneSettings", "Refitter", "tune", "Launcher", "read_points", "SEED_FRACTIONS"]

#: Constant rates of the seed design, as fractions of the burst's throughput.
SEED_FRACTIONS = (0.2, 0.45, 0.7)
SEED_SOURCE, BURST_SOURCE, PLAN_SOURCE = "tune seed", "tune burst", "tune plan"


@dataclass
class TuneSettings:
    question: str = "kstar"
    alpha: float | None = None
    k: int | None = None
    rps: tuple = ()
    within: float | None = None
    tolerance: float = 0.05
    budget_minutes: float = 30.0
    requests: tuple = (100, 300, 1000)
    seed_requests: int = 100
    burst_requests: int = 200
    warmup_s: float = 5.0
    prompt_tokens: int = 128
    output_tokens: int = 64
    verifier: str = "model"
    drafter: str = "drafter"
    model_name: str | None = None
    timeout_s: float = 60.0
    model: str = "dense"
    draws: int = 500
    chains: int = 2
    seed: int = 0
    max_points: int = 200
    outcomes: int = 32


#: Draw multiples a refit that did not converge is repeated with, in turn.
CONVERGENCE_RETRIES = (2, 4)


class Refitter:
    """A latency model compiled once and refitted on each new data set."""

    def __init__(self, model: str = "dense", *, draws: int = 500, chains: int = 2,
                 seed: int = 0, progress: bool = False):
        from bayesspec.bayes import get_model_class

        self.model = get_model_class(model)()
        self.draws, self.chains, self.seed, self.progress = draws, chains, seed, progress
        self.compiled = None
        self.data_names: set[str] = set()
        self.calls = 0

    def __call__(self, rows: pd.DataFrame, *, scale: int = 1):
        from bayesspec.data import prepare
        from bayesspec.inference.fitfile import Fit
        from bayesspec.inference import SamplerSettings, compile_model, sample_compiled, settings_for

        data = prepare(rows.reset_index(drop=True), source="<tune points>")
        settings = settings_for(self.model, SamplerSettings(
            draws=self.draws * scale, tune=self.draws * scale, chains=self.chains,
            seed=self.seed + self.calls, progress=self.progress))
        values = self.model.data_values(data)
        if self.compiled is None or set(values) != self.data_names:
            # New points can bring the engine's cap into the likelihood (its arrays join
            # the graph), which the compiled model cannot take as data.
            self.compiled = compile_model(self.model.build(data), settings)
            self.data_names = set(values)
        self.calls += 1
        tree = sample_compiled(self.compiled, settings, data=values)
        return Fit.from_sampling(self.model, data, tree)


class Launcher:
    """Starts a server per configuration from a command template (``{k}``, ``{port}``,
    ``{alpha}``; e.g. ``vllm serve M --port {port} --speculative-config
    '{{"num_speculative_tokens": {k}}}'``) and stops it when another is needed."""

    def __init__(self, template: str, port: int, *, alpha: float | None = None,
                 ready_timeout_s: float = 300.0):
        self.template, self.port, self.alpha = template, int(port), alpha
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen | None = None
        self.running_k: int | None = None

    def endpoint(self, k: int) -> Endpoint:
        endpoint = Endpoint(int(k), f"http://127.0.0.1:{self.port}", self.alpha)
        if self.running_k == int(k) and self.process and self.process.poll() is None:
            return endpoint
        self.stop()
        command = self.template.format(k=int(k), port=self.port,
                                       alpha="" if self.alpha is None else f"{self.alpha:g}")
        log(f"tune: starting k={k}: {command}")
        self.process = subprocess.Popen(shlex.split(command), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.running_k = int(k)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Unreachable(endpoint, f"the launched server exited with status "
                                  f"{self.process.returncode}")
            try:
                check_reachable(endpoint, timeout=2.0)
                return endpoint
            except Unreachable:
                time.sleep(0.3)
        self.stop()
        raise Unreachable(endpoint, f"not ready within {self.ready_timeout_s:g} s of launch")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process, self.running_k = None, None


def read_points(path: Path) -> pd.DataFrame:
    """The points written so far (empty when the file does not exist yet)."""
    if not path.exists():
        return pd.DataFrame()
    from bayesspec.data import read_tidy

    read_tidy(path)   # refuse a damaged file with the usual one-line error
    return pd.read_csv(path)


def _append(path: Path, rows: pd.DataFrame, row: dict) -> pd.DataFrame:
    rows = pd.concat([rows, pd.DataFrame([row])], ignore_index=True)
    write_table(path, rows)
    return rows


def _spent_minutes(rows: pd.DataFrame) -> float:
    if rows.empty or "load_seconds" not in rows:
        return 0.0
    return float(rows["load_seconds"].fillna(0).sum() / 60.0)


@dataclass
class TuneResult:
    settled: bool
    reason: str
    rows: pd.DataFrame
    plan: dict = field(default_factory=dict)
    fit: object = None
    points_run: int = 0


def tune(configurations, points_path, settings: TuneSettings, *, endpoint_of,
         driver=run_builtin, progress: bool = True, fit_path=None) -> TuneResult:
    """Run the loop. ``configurations``: the draft lengths (k) to measure;
    ``endpoint_of(k)`` -> :class:`Endpoint` (a fixed URL, or a launched server)."""
    from bayesspec.loadtest.planning import plan, question_from_fit

    points_path = Path(points_path)
    rows = read_points(points_path)
    if not rows.empty:
        log(f"tune: resuming from {points_path}: {len(rows)} points, "
            f"{_spent_minutes(rows):.2f} load-test minutes already spent", progress)
    refit = Refitter(settings.model, draws=settings.draws, chains=settings.chains,
                     seed=settings.seed)
    ran = 0

    def measure(k: int, rate: float, requests: int, source: str) -> None:
        nonlocal rows, ran
        endpoint = endpoint_of(k)
        spec = PointSpec(rate=rate, requests=requests, prompt_tokens=settings.prompt_tokens,
                         output_tokens=settings.output_tokens, model=settings.model_name,
                         timeout_s=settings.timeout_s)
        before = _scrape(endpoint)
        measured, seconds = driver(endpoint, spec)
        after = _scrape(endpoint)
        row = {"verifier": settings.verifier, "drafter": settings.drafter if k else "",
               "k": int(k), "alpha": settings.alpha if k and settings.alpha is not None
               else np.nan, "prefill_tokens": settings.prompt_tokens,
               "decode_tokens": settings.output_tokens, **measured,
               **_counters(before, after), "source": source,
               "load_seconds": seconds + settings.warmup_s}
        if source == BURST_SOURCE:
            row.update(strategy="throughput", saturated=True)
        rows = _append(points_path, rows, row)
        ran += 1
        mark = " (saturated: set aside)" if row.get("saturated") else ""
        log(f"tune: k={k} at {rate:.4g} RPS x {requests}: latency "
            f"{row.get('latency_mean_s', float('nan')):.4g} s at {row.get('rps', float('nan')):.4g}"
            f" RPS{mark}; {_spent_minutes(rows):.2f} of {settings.budget_minutes:g} min spent",
            progress)

    # 1. seed design
    for k in configurations:
        mine = rows[rows["k"] == k] if not rows.empty else rows
        burst = mine[mine["source"] == BURST_SOURCE] if not mine.empty else mine
        if burst.empty:
            measure(k, 1e6, settings.burst_requests, BURST_SOURCE)
            mine = rows[rows["k"] == k]
            burst = mine[mine["source"] == BURST_SOURCE]
        ceiling = float(burst["rps"].iloc[0])
        if not np.isfinite(ceiling) or ceiling <= 0:
            raise Unreachable(endpoint_of(k), "the burst of requests measured no throughput")
        done = int((mine["source"] == SEED_SOURCE).sum())
        for fraction in SEED_FRACTIONS[done:]:
            measure(k, fraction * ceiling, settings.seed_requests, SEED_SOURCE)

    # 2-4. fit, plan, measure
    while True:
        log(f"tune: fitting {len(rows)} points...", progress)
        points = rows.drop(columns=["load_seconds", "failed_requests"], errors="ignore")
        fit = refit(points)
        # no load point settles a posterior that did not converge: sample longer first
        for scale in CONVERGENCE_RETRIES:
            if fit.diagnostics["converged"]:
                break
            log(f"tune: {fit.diagnostics['text']}; refitting with {scale}x the draws",
                progress)
            fit = refit(points, scale=scale)
        question = question_from_fit(fit, settings.question, alpha=settings.alpha,
                                     k=settings.k, rps=settings.rps or None,
                                     ks=list(configurations) if settings.question == "kstar"
                                     else None, within=settings.within,
                                     seed=settings.seed + ran)
        spent = _spent_minutes(rows)
        left = settings.budget_minutes - spent
        document = plan(question, tolerance=settings.tolerance, warmup_s=settings.warmup_s,
                        requests=settings.requests, top=20, outcomes=settings.outcomes,
                        seed=settings.seed + ran)
        status = "; ".join(f"{a['answer']}: {a['decision']} (P {a['p_right']:.3f})"
                           for a in document["answers"])
        log(f"tune: {status}", progress)
        if document["settled"]:
            return _finish(TuneResult(True, "settled", rows, document, fit, ran), fit_path)
        if not document["next"]:
            # only a refit can settle it (the posterior did not converge)
            return _finish(TuneResult(False, "; ".join(document["unsettled"]), rows, document,
                                      fit, ran), fit_path)
        affordable = [c for c in document["next"] if c.minutes <= left]
        if not affordable or ran >= settings.max_points:
            reason = ("budget spent" if not affordable else "point limit reached")
            return _finish(TuneResult(False, reason, rows, document, fit, ran), fit_path)
        best = affordable[0]
        measure(best.configuration.k, best.rps, best.requests, PLAN_SOURCE)


def _finish(result: TuneResult, fit_path) -> TuneResult:
    if fit_path is not None and result.fit is not None:
        result.fit.save(fit_path)
    return result


def _scrape(endpoint: Endpoint):
    from bayesspec.ingest.prometheus import parse_scrape
    from bayesspec.loadtest.loadgen import scrape_metrics

    text = scrape_metrics(endpoint)
    if text is None:
        return None
    try:
        return parse_scrape(text, f"{endpoint.url}/metrics")
    except BadInput:
        return None


def _counters(before, after) -> dict:
    """Spec-decode counters over the point's window (vLLM's names), when the server has
    them."""
    from bayesspec.ingest.prometheus import scrape_delta

    if before is None or after is None:
        return {}
    try:
        delta = scrape_delta(before, after)
    except BadInput:
        return {}
    keep = {"num_drafts", "draft_tokens", "accepted_tokens", "acceptance_rate",
            "acceptance_length"}
    return {k: v for k, v in delta.items()
            if k in keep or k.startswith("accepted_tokens_pos")}


def endpoints_from_options(values: list[str], alpha: float | None) -> dict[int, Endpoint]:
    """``k=K=URL`` options -> {k: Endpoint}."""
    out = {}
    for text in values:
        key, sep, rest = text.partition("=")
        value, sep2, url = rest.partition("=")
        if key.strip() != "k" or not sep or not sep2 or not url.strip():
            raise BadInput(f"expected k=K=URL, got {text!r}", argument="endpoint")
        try:
            k = int(value)
        except ValueError:
            raise BadInput(f"k must be an integer >= 0 in {text!r}", argument="endpoint") \
                from None
        if k < 0:
            raise BadInput(f"k must be an integer >= 0 in {text!r}", argument="endpoint")
        if k in out:
            raise BadInput(f"two endpoints for k = {k}", argument="endpoint")
        url = url.strip()
        if not url.startswith(("http://", "https://")):
            raise BadInput(f"URL must start with http:// or https://, got {url!r}",
                           argument="endpoint")
        out[k] = Endpoint(k, url, alpha if k else None)
    return out


def with_budget(settings: TuneSettings, **changes) -> TuneSettings:
    return replace(settings, **changes)
