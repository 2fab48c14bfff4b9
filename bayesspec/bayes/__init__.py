"""The PyMC layer: statistical models of the latency laws.

Named ``bayes`` (not ``models``) because ``models/`` is the catalog of LLM and GPU cards.
"""

from __future__ import annotations

from bayesspec.bayes.base import LatencyModel, ModelInputs
from bayesspec.bayes.dense import DenseLatencyModel
from bayesspec.bayes.discrepancy import DiscrepancyLatencyModel
from bayesspec.bayes.two_regime import TwoRegimeLatencyModel
from bayesspec.bayes.spline_discrepancy import SplineDiscrepancyLatencyModel
from bayesspec.bayes.hierarchical import HierarchicalLatencyModel
from bayesspec.bayes.moe import MoELatencyModel
from bayesspec.bayes.speculative import SpeculativeLatencyModel
from bayesspec.bayes.tails import TailLatencyModel
from bayesspec.bayes.versions import SpeculativeVersionEffectModel, VersionEffectModel

MODEL_CLASSES: dict[str, type[LatencyModel]] = {
    DenseLatencyModel.name: DenseLatencyModel,
    DiscrepancyLatencyModel.name: DiscrepancyLatencyModel,
    TwoRegimeLatencyModel.name: TwoRegimeLatencyModel,
    SplineDiscrepancyLatencyModel.name: SplineDiscrepancyLatencyModel,
    SpeculativeLatencyModel.name: SpeculativeLatencyModel,
    MoELatencyModel.name: MoELatencyModel,
    VersionEffectModel.name: VersionEffectModel,
    SpeculativeVersionEffectModel.name: SpeculativeVersionEffectModel,
    HierarchicalLatencyModel.name: HierarchicalLatencyModel,
    TailLatencyModel.name: TailLatencyModel,
}


def get_model_class(name: str) -> type[LatencyModel]:
    from bayesspec.errors import BadInput

    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise BadInput(f"unknown model '{name}'; available: {', '.join(MODEL_CLASSES)}",
                       argument="model") from None


def load_fit(path) -> "Fit":
    """Read a fit file back with the model class that made it (its name and version
    checked: a file from another model version is refused, never misread)."""
    from bayesspec.errors import FitFileError
    from bayesspec.inference.fitfile import read_tree

    tree = read_tree(path)
    name = tree.attrs.get("bayesspec_model")
    model_class = MODEL_CLASSES.get(name)
    if model_class is None:
        raise FitFileError(f"made by model '{name}', unknown to this bayesspec", file=str(path))
    return model_class.from_tree(tree, path)


def versions_model_for(data) -> str:
    """The two-version model for ``data``: version effects on the six cycle
    coefficients when the (unsaturated) data have speculative rows, else on C1 and C2."""
    rows = data.loc[~data["excluded"]] if "excluded" in data.columns else data
    return (SpeculativeVersionEffectModel.name if (rows["k"] > 0).any()
            else VersionEffectModel.name)


__all__ = ["LatencyModel", "ModelInputs", "DenseLatencyModel", "DiscrepancyLatencyModel",
           "TwoRegimeLatencyModel",
           "SpeculativeLatencyModel", "MoELatencyModel", "VersionEffectModel",
           "SpeculativeVersionEffectModel",
           "HierarchicalLatencyModel", "MODEL_CLASSES",
           "get_model_class", "versions_model_for", "load_fit"]
