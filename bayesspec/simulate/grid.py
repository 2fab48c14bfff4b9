"""Whole datasets in one call: a grid of configurations, each swept GuideLLM-style.

A grid is a TOML file (or one of the built-in grids below, by name)::

    requests = 1000          # per load point
    seed = 0
    sweep = 9                # points per sweep (synchronous + throughput + 7 rates)
    arrivals = "poisson"     # or "constant"
    gpu = "H100"

    [[configs]]              # every list-valued key multiplies out
    verifier = ["Qwen3-8B", "Qwen3-14B"]
    prefill = [256, 512]
    decode = [256, 512]

    [[configs]]
    verifier = "Qwen3-8B"
    drafter = "EAGLE3-Qwen3-8B"
    lengths = [[512, 512], [1024, 256]]   # (prefill, decode) pairs instead of a product
    k = [0, 1, 3]                          # k = 0 is the dense baseline (alpha ignored)
    alpha = [0.6, 0.8]

Top-level ``length_dist`` ("fixed", "uniform", "lognormal") and ``length_cv`` make
request lengths vary. ``concurrency = [1, 4, 16, 64]`` runs each configuration as a
closed-loop sweep at those client counts instead (``vllm bench serve --max-concurrency``,
GuideLLM's concurrent profile; ``sweep`` and ``arrivals`` then do not apply), and
``max_num_seqs`` sets the engine's batch cap. A ``[[configs]]`` table may also override
``requests``, ``seed``, ``sweep``, ``arrivals``, ``gpu``, ``length_dist``, ``length_cv``,
``concurrency`` and ``max_num_seqs``.
"""

from __future__ import annotations

import copy
import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from bayesspec.errors import BadInput

from bayesspec.simulate.sweep import SweepResult, at_concurrency, setup, sweep

__all__ = ["GridItem", "BUILTIN_GRIDS", "load_grid", "expand_grid", "run_grid"]

_TOP_KEYS = {"requests", "seed", "sweep", "arrivals", "gpu", "configs", "name", "description",
             "length_dist", "length_cv", "concurrency", "max_num_seqs"}
_CONFIG_KEYS = {"verifier", "gpu", "drafter", "prefill", "decode", "lengths", "k", "alpha",
                "requests", "seed", "sweep", "arrivals", "length_dist", "length_cv",
                "concurrency", "max_num_seqs"}

PAPER_LENGTHS = [256, 512, 768, 1024]

BUILTIN_GRIDS: dict[str, dict] = {
    "paper-dense": {
        "description": "dense verifiers x the paper's 16 (prefill, decode) pairs, H100",
        "requests": 2000, "seed": 0, "sweep": 9, "arrivals": "poisson", "gpu": "H100",
        "configs": [{"verifier": ["Qwen3-1.7B", "Qwen3-8B", "Qwen3-14B", "Llama-3.1-8B"],
                     "prefill": PAPER_LENGTHS, "decode": PAPER_LENGTHS}],
    },
    "paper-speculative": {
        "description": "Qwen3-8B + its EAGLE-3 head, alpha x k, with the dense baseline, H100",
        "requests": 2000, "seed": 0, "sweep": 9, "arrivals": "poisson", "gpu": "H100",
        "configs": [{"verifier": "Qwen3-8B", "drafter": "EAGLE3-Qwen3-8B",
                     "lengths": [[512, 512], [1024, 256]],
                     "k": [0, 1, 2, 4, 6, 8], "alpha": [0.5, 0.6, 0.7, 0.8, 0.9]}],
    },
    "paper-moe": {
        "description": "two MoE verifiers, dense and with EAGLE-3 heads at k = 1, 3, H100",
        "requests": 2000, "seed": 0, "sweep": 9, "arrivals": "poisson", "gpu": "H100",
        "configs": [{"verifier": ["gpt-oss-20b", "Qwen3-30B-A3B"],
                     "lengths": [[512, 512], [1024, 256]],
                     "k": [0, 1, 3], "alpha": [0.6, 0.8]}],
    },
    "smoke": {
        "description": "a tiny grid for trying the command (a few seconds)",
        "requests": 500, "seed": 0, "sweep": 5, "arrivals": "poisson", "gpu": "H100",
        "configs": [{"verifier": "Qwen3-8B", "lengths": [[256, 256]], "k": [0, 3],
                     "alpha": [0.8]}],
    },
}


@dataclass(frozen=True)
class GridItem:
    verifier: str
    gpu: str
    drafter: str | None
    prefill: int
    decode: int
    k: int
    alpha: float | None
    requests: int
    seed: int
    sweep: int
    arrivals: str
    length_dist: str = "fixed"
    length_cv: float = 0.0
    #: client counts of a closed-loop sweep; empty: a GuideLLM-style rate sweep
    concurrency: tuple[int, ...] = ()
    max_num_seqs: int = 1024

    def label(self) -> str:
        text = f"{self.verifier} p{self.prefill} g{self.decode}"
        if self.k:
            text += f" k{self.k} a{self.alpha:g}"
        return text


def load_grid(spec: str) -> dict:
    """A built-in grid by name, or a grid TOML file by path."""
    if spec in BUILTIN_GRIDS:
        return copy.deepcopy(BUILTIN_GRIDS[spec])
    path = Path(spec)
    if not path.exists():
        raise BadInput(f"no grid file {spec!r} and no built-in grid of that name (built-in: "
                       f"{', '.join(BUILTIN_GRIDS)})", file=spec)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"not valid TOML: {exc}", file=spec) from None
    except OSError as exc:
        raise BadInput(f"cannot read grid: {exc.strerror or exc}", file=spec) from None
    data = dict(data)
    data["_file"] = str(path)
    return data


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _whole(value, n: int, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or value < 1:
        raise BadInput(f"configs entry {n}: {key} must be a whole number >= 1, got {value!r}",
                       file=where, column=key)
    return int(value)


def _levels(value, n: int, where: str) -> tuple[int, ...]:
    return tuple(_whole(v, n, where, "concurrency") for v in _as_list(value))


def expand_grid(grid: dict) -> list[GridItem]:
    """Every configuration of the grid, in file order, duplicates removed."""
    where = grid.get("_file", "<grid>")
    unknown = set(grid) - _TOP_KEYS - {"_file"}
    if unknown:
        raise BadInput(f"unknown grid key {sorted(unknown)[0]!r} (known: "
                       f"{', '.join(sorted(_TOP_KEYS))})", file=where)
    configs = grid.get("configs")
    if not configs or not isinstance(configs, list):
        raise BadInput("a grid needs at least one [[configs]] table", file=where,
                       column="configs")
    items: list[GridItem] = []
    seen = set()
    for n, cfg in enumerate(configs, start=1):
        if not isinstance(cfg, dict):
            raise BadInput(f"configs entry {n} is not a table", file=where, column="configs")
        unknown = set(cfg) - _CONFIG_KEYS
        if unknown:
            raise BadInput(f"configs entry {n}: unknown key {sorted(unknown)[0]!r}", file=where,
                           column=sorted(unknown)[0])
        if "verifier" not in cfg:
            raise BadInput(f"configs entry {n} names no verifier", file=where, column="verifier")
        get = lambda key, default=None: cfg.get(key, grid.get(key, default))  # noqa: E731
        if "lengths" in cfg:
            if "prefill" in cfg or "decode" in cfg:
                raise BadInput(f"configs entry {n}: give lengths or prefill/decode, not both",
                               file=where, column="lengths")
            try:
                lengths = [(int(p), int(g)) for p, g in cfg["lengths"]]
            except (TypeError, ValueError):
                raise BadInput(f"configs entry {n}: lengths must be [prefill, decode] pairs",
                               file=where, column="lengths") from None
        else:
            lengths = list(itertools.product(_as_list(cfg.get("prefill", 512)),
                                             _as_list(cfg.get("decode", 512))))
        alphas = _as_list(cfg.get("alpha", []))
        for verifier, gpu, drafter, (p, g), k in itertools.product(
                _as_list(cfg["verifier"]), _as_list(get("gpu", "H100")),
                _as_list(cfg.get("drafter", None)), lengths, _as_list(cfg.get("k", 0))):
            try:
                k = int(k)
            except (TypeError, ValueError):
                raise BadInput(f"configs entry {n}: k must be an integer, got {k!r}",
                               file=where, column="k") from None
            for alpha in ([None] if k == 0 else alphas):
                if k > 0 and alpha is None:
                    raise BadInput(f"configs entry {n}: k = {k} needs alpha values", file=where,
                                   column="alpha")
                item = GridItem(verifier=str(verifier), gpu=str(gpu),
                                drafter=str(drafter) if drafter else None, prefill=int(p),
                                decode=int(g), k=k, alpha=None if alpha is None else float(alpha),
                                requests=int(get("requests", 1000)), seed=int(get("seed", 0)),
                                sweep=int(get("sweep", 9)),
                                arrivals=str(get("arrivals", "poisson")),
                                length_dist=str(get("length_dist", "fixed")),
                                length_cv=float(get("length_cv", 0.0)),
                                concurrency=_levels(get("concurrency", []), n, where),
                                max_num_seqs=_whole(get("max_num_seqs", 1024), n, where,
                                                    "max_num_seqs"))
                if item not in seen:
                    seen.add(item)
                    items.append(item)
    return items


def run_grid(grid: dict, *, catalog=None,
             progress: Callable[[int, int, str], None] | None = None) -> tuple[pd.DataFrame,
                                                                               list[SweepResult]]:
    """Sweep every configuration; returns all tidy rows and the sweep results."""
    items = expand_grid(grid)
    results = []
    for i, item in enumerate(items):
        if progress is not None:
            progress(i, len(items), item.label())
        s = setup(item.verifier, item.gpu, drafter=item.drafter, k=item.k, alpha=item.alpha,
                  prefill=item.prefill, decode=item.decode, length_dist=item.length_dist,
                  length_cv=item.length_cv, catalog=catalog, max_num_seqs=item.max_num_seqs)
        if item.concurrency:
            results.append(at_concurrency(s, item.concurrency, n_requests=item.requests,
                                          seed=item.seed))
        else:
            results.append(sweep(s, item.sweep, n_requests=item.requests, seed=item.seed,
                                 arrivals=item.arrivals))
    if progress is not None:
        progress(len(items), len(items), "done")
    rows = pd.concat([r.rows for r in results], ignore_index=True)
    return rows, results
