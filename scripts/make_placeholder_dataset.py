"""Regenerate bayesspec/datasets/dense_placeholder.csv (equation-generated, fixed seed).

Three dense verifiers (Qwen3-8B/14B/32B on H100, roofline-derived C1 and C2) x the
paper's 16 (prefill, decode) combinations x a 9-rate GuideLLM-like sweep, with realistic
noise (see bayesspec/synthetic.py). The true C1 and C2 are written beside it so fits can
be checked. Run: python scripts/make_placeholder_dataset.py
"""

from pathlib import Path

from bayesspec.synthetic import generate_sweeps, placeholder_truth

OUT = Path(__file__).resolve().parent.parent / "bayesspec" / "datasets"

truth = placeholder_truth()
data = generate_sweeps(truth, seed=20261130)
data["source"] = "bayesspec.synthetic placeholder"
data.to_csv(OUT / "dense_placeholder.csv", index=False, float_format="%.6g")
truth.to_csv(OUT / "dense_placeholder_truth.csv", index=False, float_format="%.8g")
print(f"wrote {len(data)} rows ({len(truth)} groups) to {OUT}")
