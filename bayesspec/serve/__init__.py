"""A live, OpenAI-compatible server whose engine is the serving simulator.

``bayesspec serve`` runs :mod:`bayesspec.simulate`'s scheduler (continuous batching,
chunked prefill, KV-cache limits and preemption, speculative decoding with a forced
acceptance, MoE step costs) in wall-clock time behind ``/v1/completions`` and
``/v1/chat/completions``, so a real load generator (GuideLLM, ``vllm bench serve``) sees
latency grow with load through real queueing, and scrapes vLLM-named counters from
``/metrics``. Modules: :mod:`.live` (the stepped engine), :mod:`.app` (HTTP),
:mod:`.metrics` (Prometheus); the verb is :mod:`bayesspec.cli.serve`.
"""

from bayesspec.serve.app import HOST, SimulatedServer
from bayesspec.serve.live import LiveEngine, LiveRequest, StepStats
from bayesspec.serve.metrics import ServerMetrics

__all__ = ["HOST", "SimulatedServer", "LiveEngine", "LiveRequest", "StepStats",
           "ServerMetrics"]
