"""What kind of load-test file this is: pure recognisers, shared by the tidy-data reader
(:mod:`bayesspec.data`, which refuses report files with a pointer to ``bayesspec ingest``)
and the readers of :mod:`bayesspec.ingest` (which import :mod:`bayesspec.data`, so these
live here, in a module that imports nothing of bayesspec's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

#: Keys of a ``vllm bench serve --save-result`` object; two or more mark one.
VLLM_BENCH_MARKERS = ("request_throughput", "completed", "mean_ttft_ms",
                      "total_output_tokens", "mean_tpot_ms", "mean_e2el_ms")
PROMETHEUS_SUFFIXES = {".prom", ".metrics"}
YAML_SUFFIXES = {".yaml", ".yml"}
_PROM_HINT = re.compile(r"^# (HELP|TYPE) [A-Za-z_:]", re.MULTILINE)
_SAMPLE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{.*\})?\s+\S+(\s+\S+)?\s*$")
_YAML_REPORT = re.compile(r"^benchmarks:\s*$", re.MULTILINE)
#: Bytes of a file read to tell a report from a table when the file is larger.
SNIFF_BYTES = 8 * 1024 * 1024


def clean_key(key) -> str:
    """A vllm bench key without surrounding blanks and trailing colons."""
    return str(key).strip().rstrip(":").strip()


def is_guidellm(value) -> bool:
    return isinstance(value, dict) and "benchmarks" in value


def is_vllm_bench(value) -> bool:
    if not isinstance(value, dict):
        return False
    keys = {clean_key(k) for k in value}
    return sum(marker in keys for marker in VLLM_BENCH_MARKERS) >= 2


def looks_like_prometheus(text: str, name: str) -> bool:
    """Prometheus exposition text (a /metrics scrape), by suffix or content."""
    if Path(name).suffix.lower() in PROMETHEUS_SUFFIXES or _PROM_HINT.search(text[:65536]):
        return True
    lines = [line for line in text.splitlines()[:50] if line.strip() and not line.startswith("#")]
    return bool(lines) and all(_SAMPLE.match(line) and ("{" in line or line.split()[0]
                                                         .endswith(("_total", "_count")))
                               for line in lines)


def describe_report(text: str, name: str) -> str | None:
    """What a file that is not a tidy table is ('a GuideLLM report (JSON)', ...), from its
    text (all of it, or its first :data:`SNIFF_BYTES`); None when it may be a table."""
    stripped = text.lstrip("\ufeff \t\r\n")
    suffix = Path(name).suffix.lower()
    if stripped[:1] in ("{", "["):
        return _describe_json(stripped)
    if suffix in YAML_SUFFIXES or _YAML_REPORT.search(stripped[:65536]):
        return "a GuideLLM report (YAML)" if _YAML_REPORT.search(stripped) else "a YAML file"
    if looks_like_prometheus(stripped, name):
        return "a Prometheus /metrics scrape"
    return None


def _describe_json(text: str) -> str:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
        lines = [line for line in text.splitlines() if line.strip()]
        first = None
        if lines:
            try:
                first = json.loads(lines[0])
            except (ValueError, RecursionError):
                first = None
        if len(lines) > 1 and is_vllm_bench(first):
            return "vllm bench results (JSON Lines)"
        if isinstance(first, dict):
            return "a JSON Lines file"
        # Not valid JSON (or cut at SNIFF_BYTES): tell by the keys it names.
        if '"benchmarks"' in text:
            return "a GuideLLM report (JSON)"
        if sum(f'"{marker}"' in text for marker in VLLM_BENCH_MARKERS) >= 2:
            return "a vllm bench result (JSON)"
        return "a JSON document"
    if is_guidellm(value):
        return "a GuideLLM report (JSON)"
    if is_vllm_bench(value) or (isinstance(value, list) and value
                                and all(is_vllm_bench(v) for v in value)):
        return "a vllm bench result (JSON)"
    return "a JSON document"
