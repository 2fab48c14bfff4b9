"""``/metrics``: Prometheus exposition through ``prometheus_client``, with vLLM's names.

The speculative-decoding counters and the request counters carry vLLM's names and its
``model_name`` / ``engine`` labels (FORMATS.md), so the scrape reader of
:mod:`bayesspec.ingest.prometheus` reads this server's output as it reads vLLM's. Like
vLLM, a dense server exposes no ``vllm:spec_decode_*`` series and a speculative one creates
its per-position series (``position`` 0..k-1) at start-up. ``bayesspec:*`` series are this
server's own: how far real step times drifted from simulated ones.

Each server gets its own registry, so several can live in one process (tests).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["ServerMetrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)


class ServerMetrics:
    """The counters, gauges and histograms of one server, and the hooks that feed them."""

    def __init__(self, model_name: str, k: int = 0, engine: str = "0"):
        self.registry = CollectorRegistry()
        self.k = int(k)
        labels = ["model_name", "engine"]
        values = (model_name, engine)
        reg = self.registry

        def counter(name, doc, extra=()):
            return Counter(name, doc, labels + list(extra), registry=reg)

        self._success = counter("vllm:request_success", "Count of successfully processed "
                                "requests.", ["finished_reason"])
        self.success = self._success.labels(*values, "length")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens "
                                     "processed.").labels(*values)
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation "
                                         "tokens processed.").labels(*values)
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption "
                                   "from the engine.").labels(*values)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model "
                             "execution batches.", labels, registry=reg).labels(*values)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be "
                             "processed.", labels, registry=reg).labels(*values)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request "
                             "latency in seconds.", labels, registry=reg,
                             buckets=_LATENCY_BUCKETS).labels(*values)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to "
                              "first token in seconds.", labels, registry=reg,
                              buckets=_LATENCY_BUCKETS).labels(*values)
        if self.k > 0:
            self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding "
                                  "drafts.").labels(*values)
            self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of "
                                        "draft tokens.").labels(*values)
            self.accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Number "
                                           "of accepted tokens.").labels(*values)
            per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted "
                              "tokens per draft position.", ["position"])
            self.per_position = [per_pos.labels(*values, str(p)) for p in range(self.k)]
        self.steps = Counter("bayesspec:engine_steps", "Engine steps run.",
                             registry=reg)
        self.simulated_s = Counter("bayesspec:simulated_step_seconds", "Sum of simulated "
                                   "step times (after --time-scale).", registry=reg)
        self.real_s = Counter("bayesspec:real_step_seconds", "Sum of real times between "
                              "step commits of a busy engine.", registry=reg)
        self.batch = Histogram("bayesspec:step_batch_size", "Requests scheduled per step.",
                               registry=reg, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))

    # hooks called by the engine and the HTTP layer
    def draft(self, drafts: int, accepted: int) -> None:
        self.drafts.inc()
        self.draft_tokens.inc(drafts)
        if accepted:
            self.accepted_tokens.inc(accepted)
            for p in range(accepted):
                self.per_position[p].inc()

    def preempted(self) -> None:
        self.preemptions.inc()

    def queue(self, running: int, waiting: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)

    def step(self, simulated_s: float, real_s: float, batch: int) -> None:
        self.steps.inc()
        self.simulated_s.inc(simulated_s)
        self.real_s.inc(max(real_s, 0.0))
        self.batch.observe(batch)

    def finished(self, prompt: int, output: int, latency_s: float, ttft_s: float) -> None:
        self.success.inc()
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(output)
        self.e2e.observe(latency_s)
        self.ttft.observe(ttft_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
