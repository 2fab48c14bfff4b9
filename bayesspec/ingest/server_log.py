"""The engine's limits from a vLLM server's start-up log.

vLLM prints its KV cache at start-up, one line per engine core (data-parallel rank;
tensor parallelism is already summed into it)::

    (EngineCore_DP0 pid=2412130) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens
    ... Maximum concurrency for 100,000 tokens per request: 6.86x

and its non-default arguments (``'max_num_seqs': 128``) or engine config
(``max_num_seqs=128``). A server is one engine core here: with several data-parallel
ranks each is its own server, so their sizes must agree (their sum would describe no
single engine). A log holding several start-ups counts the last.
"""

from __future__ import annotations

import re
from pathlib import Path

from bayesspec.errors import BadInput
from bayesspec.ingest.loaders import decode_text, read_bytes

_KV = re.compile(r"(?:EngineCore_DP(\d+)[^\n]*?)?GPU KV cache size:\s*([\d,]+)\s*tokens")
_SEQS = re.compile(r"max_num_seqs['\"]?\s*[:=]\s*(\d+)")
_BATCHED = re.compile(r"max_num_batched_tokens['\"]?\s*[:=]\s*(\d+)")


def engine_limits_from_log(path: str | Path) -> dict[str, int]:
    """``kv_cache_tokens``, ``max_num_seqs``, ``max_num_batched_tokens``: those the log
    states (a BadInput naming the file when it states none)."""
    name = str(path)
    text = decode_text(read_bytes(path), name)
    limits: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for match in _KV.finditer(text):
        sizes[match.group(1) or "0"] = int(match.group(2).replace(",", ""))
    if sizes:
        if len(set(sizes.values())) > 1:
            shown = ", ".join(f"rank {rank}: {size}" for rank, size in sorted(sizes.items()))
            raise BadInput(f"the data-parallel engine cores report different KV cache sizes "
                           f"({shown}); give each server's log or --kv-cache-tokens",
                           file=name)
        limits["kv_cache_tokens"] = next(iter(sizes.values()))
    for key, pattern in (("max_num_seqs", _SEQS), ("max_num_batched_tokens", _BATCHED)):
        found = pattern.findall(text)
        if found:
            limits[key] = int(found[-1])
    if not limits:
        raise BadInput("no engine limits in this log (looked for 'GPU KV cache size: N "
                       "tokens', max_num_seqs, max_num_batched_tokens): is it the vLLM "
                       "server's start-up log?", file=name)
    return limits
