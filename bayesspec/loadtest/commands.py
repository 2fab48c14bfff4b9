"""Ready-to-run load-test commands for a planned point: GuideLLM (the installed version's
syntax) and ``vllm bench serve`` command lines, the ``bayesspec ingest`` line that turns
the result into rows, the prompt and output lengths to ask for, and the columns a new
point must carry to join a fit."""

from __future__ import annotations

import shlex

import numpy as np

#: Prompt and output tokens of a planned point when neither it nor the data say.
DEFAULT_TOKENS = 512


def required_columns(question: str, metrics=()) -> list[str]:
    """Columns a new load point must carry to join a fit (beyond the design columns)."""
    columns = ["verifier", "drafter", "k", "alpha", "prefill_tokens", "decode_tokens", "rps",
               "rps_target", "latency_mean_s", "latency_std_s", "n_requests"]
    from bayesspec.data.schema import METRIC_COLUMNS

    for metric in metrics:
        column = METRIC_COLUMNS.get(metric)
        if column and column not in columns:
            columns.append(column)
    return columns


def guidellm_version() -> str | None:
    """The installed GuideLLM's version, or None when it is not importable."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        import importlib.util

        if importlib.util.find_spec("guidellm") is None:
            return None
        return version("guidellm")
    except (PackageNotFoundError, ValueError):
        return None


def _older_guidellm(version: str | None) -> bool:
    if version is None:
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < (0, 7)


def planned_lengths(data, prefill: int | None = None,
                    decode: int | None = None) -> tuple[int, int]:
    """The prompt and output lengths of the planned load tests: the chosen group's where
    given (a fit of several groups has no one length: the median over all of them would
    measure none of them), else the fitted data's median (512 without the column)."""
    def tokens(chosen, column):
        if chosen is not None:
            return int(chosen)
        values = data[column].dropna() if column in data.columns else []
        return int(np.median(values)) if len(values) else DEFAULT_TOKENS
    return tokens(prefill, "prefill_tokens"), tokens(decode, "decode_tokens")


def command_lines(entry: dict, *, target: str, model: str | None = None,
                  prefill: int | None = None, decode: int | None = None,
                  version: str | None = None) -> dict:
    """Ready-to-run load-test commands for one planned point: GuideLLM (the installed
    version's syntax, else the current release's: 0.7 and newer) at a constant rate of
    R with N requests, and ``vllm bench serve`` (``--request-rate R --num-prompts N``),
    and the ``ingest`` line that labels its rows with the point's configuration.

    The point's own workload comes first: its ``prefill_tokens``, ``decode_tokens``,
    ``verifier`` and ``drafter`` (a plan's entry carries its group's or setup's);
    ``prefill``/``decode`` stand in where it has none. ``model``: the name the server
    serves (default: the entry's verifier)."""
    rate, n, k = entry["rps"], entry["requests"], entry["k"]
    alpha = entry.get("alpha")
    prefill = int(entry.get("prefill_tokens") or prefill or DEFAULT_TOKENS)
    decode = int(entry.get("decode_tokens") or decode or DEFAULT_TOKENS)
    verifier = entry.get("verifier")
    model = model or verifier or "model"
    stem = f"point-k{k}-r{rate:g}-n{n}"
    if _older_guidellm(version):
        guidellm = (f"guidellm benchmark --target {target} --model {model} --profile constant "
                    f"--rate {rate:g} --max-requests {n} --data "
                    f"\"prompt_tokens={prefill},output_tokens={decode}\" --output-path "
                    f"{stem}.json")
    else:
        guidellm = (f"guidellm run --backend kind=openai_http,target={target},model={model} "
                    f"--profile kind=constant,rate={rate:g} --data kind=synthetic_text,"
                    f"prompt_tokens={prefill},output_tokens={decode} --constraint "
                    f"kind=max_requests,count={n} --output kind=json,path={stem}.json")
    metadata = f"k={k}" + ("" if alpha is None else f" alpha={alpha:g}")
    vllm = (f"vllm bench serve --backend openai --base-url {target} --model {model} "
            f"--dataset-name random --random-input-len {prefill} --random-output-len {decode} "
            f"--request-rate {rate:g} --num-prompts {n} --percentile-metrics "
            f"ttft,tpot,itl,e2el --save-result --result-filename {stem}.vllm.json "
            f"--metadata {metadata}")
    design = []
    if verifier:
        design.append(f"--verifier {shlex.quote(str(verifier))}")
    if int(k) > 0 and entry.get("drafter"):
        design.append(f"--drafter {shlex.quote(str(entry['drafter']))}")
    design.append(f"--k {k}" + ("" if alpha is None else f" --alpha {alpha:g}"))
    design.append(f"--prefill {prefill} --decode {decode}")
    ingest = f"bayesspec ingest {stem}.json {' '.join(design)} -o {stem}.csv"
    return {"guidellm": guidellm, "vllm": vllm, "ingest": ingest,
            "guidellm_syntax": version or "current release (0.7+)"}
