"""The closed-form latency laws of LLM serving with speculative decoding (docs/laws.md).

Every formula is written once, in the module of its subject:

- :mod:`~bayesspec.laws.mean`: eq. (1), its variants and its load factor; eq. (2)'s
  speedup and crossover; eq. (3)'s effective costs.
- :mod:`~bayesspec.laws.acceptance`: tokens committed per cycle, E(alpha, k), by draft
  position, and from the token process (docs/laws.md, "the acceptance process").
- :mod:`~bayesspec.laws.tails`: latency summaries under load and the sampling error of a
  reported percentile.
- :mod:`~bayesspec.laws.queue`: the engine's concurrency cap (the slot queue).
- :mod:`~bayesspec.laws.profile`: the decode-iteration profile and batched prefill.
- :mod:`~bayesspec.laws.runs`: one load test as a run (its sampling error along a sweep,
  its fill and drain).
- :mod:`~bayesspec.laws.moe` and :mod:`~bayesspec.laws.moe_search`: eq. (4), expert
  coverage, in numpy and inside a graph.
- :mod:`~bayesspec.laws.trends`: the cycle coefficients' roofline trends.
- :mod:`~bayesspec.laws.roofline`: the compute roof of one engine step (its searches'
  Ops: :mod:`~bayesspec.laws.roof_kernels`).

The public functions work on numpy arrays with broadcasting and handle the edge cases
(saturation -> ``inf``, no crossover -> ``nan``); those of the contract
(docs/CONTRACT.md) are ``latency``, ``expected_accepted``, ``effective_costs``, ``speedup``,
``crossover_rps``, ``expert_coverage`` and ``moe_latency``. The ``*_expr`` helpers are the
bare algebra and take an ``xp`` namespace (``numpy`` or ``pytensor.tensor``); the PyMC
models in :mod:`bayesspec.bayes` build their graphs from those same helpers, so a
prediction and a likelihood can never drift apart.

Every law is re-exported here (``bayesspec.laws.latency``). Importing the package loads
numpy alone: SciPy, PyTensor and numba are imported inside the functions that need them.
"""

from __future__ import annotations

from bayesspec.laws._numeric import _as_float, _special
from bayesspec.laws.mean import (costs_for_acceptance_length, crossover_rps, curved_latency,
                                 curved_latency_expr, effective_costs, effective_costs_expr,
                                 latency, latency_expr, load_amplification_expr,
                                 load_elasticity_expr, load_factor_expr,
                                 measured_load_amplification, speedup, two_regime_latency,
                                 two_regime_latency_expr)
from bayesspec.laws.acceptance import (acceptance_length_of_pmf_expr, expected_accepted,
                                       accepted_moments_of_pmf_expr, depth_reliability_expr,
                                       expected_accepted_expr,
                                       expected_accepted_positions_expr,
                                       stationary_law_expr, token_chain_acceptance,
                                       token_chain_expected_accepted,
                                       token_cycle_acceptance_expr,
                                       token_cycle_acceptance_upto_expr,
                                       token_regimes_acceptance_expr,
                                       two_state_transition_expr)
from bayesspec.laws.tails import (QUANTILE_RULES, batch_count_loads,
                                  batch_count_quantile_expr, count_spread_quantile_expr,
                                  log_normal_quantile_expr, percentile_latency,
                                  percentile_latency_expr, quantile_rank,
                                  quantile_sampling_moments, rate_meeting_target,
                                  sampled_quantile_error_expr)
from bayesspec.laws.queue import (CAP_SOURCES, LOG_NEGLIGIBLE_CAP_TAIL, binding_cap_source,
                                  cap_tail_log_bound, cap_throughput, cap_throughput_expr,
                                  capped_latency, capped_load_elasticity, ceiling_rps,
                                  concurrency_cap, kv_tokens_per_request, queue_wait_scale,
                                  slot_queue_latency_expr)
from bayesspec.laws.profile import (PREFILL_FIXED_SHARE_MAX, PROFILE_PAD_KNOT,
                                    _profile_time, batched_prefill_stall_expr,
                                    decode_profile_shift, prefill_fixed_part,
                                    profile_chain_extra, profile_chain_latency_expr,
                                    profile_concurrency_expr, profile_segments,
                                    prompts_per_prefill_expr)
from bayesspec.laws.runs import (FLUID_RUN_CHUNK, FLUID_RUN_LIFETIMES, FLUID_RUN_MAX_STEPS,
                                 FLUID_RUN_ROW_LIMIT, FLUID_RUN_STEPS, RUN_EFFECT_SHARE,
                                 RUN_OWN_LENGTH, fluid_run_latency, run_mean_log_sd,
                                 run_process_conditional, run_process_factor,
                                 run_process_factor_expr, run_process_layout,
                                 slot_wait_in_run)
from bayesspec.laws.moe import (expert_coverage, expert_coverage_expr, moe_costs_expr,
                                moe_latency, verification_tokens)
from bayesspec.laws.moe_search import (MOE_BISECTION_STEPS, MOE_NEWTON_STEPS,
                                       moe_latency_expr)

__all__ = ["latency_expr", "curved_latency_expr", "two_regime_latency_expr",
           "load_factor_expr", "load_amplification_expr", "measured_load_amplification",
           "load_elasticity_expr", "effective_costs_expr", "costs_for_acceptance_length",
           "latency", "curved_latency", "two_regime_latency", "effective_costs", "speedup",
           "crossover_rps", "expected_accepted_expr", "expected_accepted_positions_expr",
           "stationary_law_expr", "token_cycle_acceptance_expr",
           "token_cycle_acceptance_upto_expr", "token_regimes_acceptance_expr",
           "acceptance_length_of_pmf_expr", "two_state_transition_expr",
           "token_chain_acceptance", "token_chain_expected_accepted", "expected_accepted",
           "percentile_latency_expr", "count_spread_quantile_expr",
           "log_normal_quantile_expr", "batch_count_quantile_expr", "batch_count_loads",
           "rate_meeting_target", "percentile_latency",
           "QUANTILE_RULES", "quantile_rank", "quantile_sampling_moments",
           "sampled_quantile_error_expr", "cap_throughput_expr", "slot_queue_latency_expr",
           "queue_wait_scale", "LOG_NEGLIGIBLE_CAP_TAIL", "cap_tail_log_bound",
           "capped_latency", "cap_throughput", "ceiling_rps", "capped_load_elasticity",
           "kv_tokens_per_request", "concurrency_cap", "CAP_SOURCES", "binding_cap_source",
           "decode_profile_shift", "PROFILE_PAD_KNOT", "profile_segments",
           "profile_concurrency_expr", "profile_chain_extra", "prompts_per_prefill_expr",
           "PREFILL_FIXED_SHARE_MAX", "prefill_fixed_part", "batched_prefill_stall_expr",
           "profile_chain_latency_expr", "run_mean_log_sd", "RUN_OWN_LENGTH",
           "run_process_layout", "run_process_factor_expr", "run_process_factor",
           "run_process_conditional", "RUN_EFFECT_SHARE", "FLUID_RUN_STEPS",
           "FLUID_RUN_LIFETIMES", "FLUID_RUN_CHUNK", "FLUID_RUN_MAX_STEPS",
           "FLUID_RUN_ROW_LIMIT", "fluid_run_latency", "slot_wait_in_run",
           "expert_coverage_expr", "moe_costs_expr", "expert_coverage",
           "verification_tokens", "moe_latency", "MOE_BISECTION_STEPS", "MOE_NEWTON_STEPS",
           "moe_latency_expr"]
