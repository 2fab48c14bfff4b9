"""Read the files users already have into tidy rows (``bayesspec ingest``).

Supported, recognised by content (FORMATS.md):

- GuideLLM reports, JSON or YAML, schema v1 (GuideLLM 0.5.x-0.6.x) and v2 (0.7+), told
  apart by ``metadata.version``; 0.3/0.4 reports are refused with a clear message.
- ``vllm bench serve --save-result`` JSON and ``--append-result`` JSON Lines, with or
  without e2el keys (latency then reconstructed from TTFT and TPOT, flagged in
  ``latency_reconstructed``), speculative-decoding fields, ``--metadata`` design values.
- vLLM Prometheus ``/metrics`` scrapes taken before and after each load point
  (``--metrics BEFORE AFTER`` per point, or a sidecar's ``[[metrics]]`` entries), turned
  into counts, acceptance rate, acceptance length and per-position rates.

Design values that the files do not hold come from flags or a sidecar
(:mod:`bayesspec.ingest.design`); a value in the file wins over nothing, and a flag or
sidecar that contradicts the file is an error. Every problem is a
:class:`bayesspec.errors.BadInput` naming the file, the row (JSONL line) and the field path.
"""

from bayesspec.ingest.core import IngestResult, ingest_files, parse_report, read_report
from bayesspec.ingest.design import Sidecar, find_sidecars, load_sidecar, parse_sidecar
from bayesspec.ingest.prometheus import Scrape, parse_scrape, read_scrape, scrape_delta
from bayesspec.ingest.records import DESIGN_FIELDS, Point, Report

__all__ = [
    "IngestResult", "ingest_files", "parse_report", "read_report",
    "Sidecar", "find_sidecars", "load_sidecar", "parse_sidecar",
    "Scrape", "parse_scrape", "read_scrape", "scrape_delta",
    "DESIGN_FIELDS", "Point", "Report",
]
