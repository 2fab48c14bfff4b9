"""The PyMC layer: statistical models of the latency laws.

Named ``bayes`` (not ``models``) because ``models/`` is the catalog of LLM and GPU cards.
"""

from __future__ import annotations

from .base import LatencyModel, ModelInputs
from .dense import DenseLatencyModel
from .hierarchical import HierarchicalLatencyModel
from .moe import MoELatencyModel
from .speculative import SpeculativeLatencyModel
from .versions import SpeculativeVersionEffectModel, VersionEffectModel

MODEL_CLASSES: dict[str, type[LatencyModel]] = {
    DenseLatencyModel.name: DenseLatencyModel,
    SpeculativeLatencyModel.name: SpeculativeLatencyModel,
    MoELatencyModel.name: MoELatencyModel,
    VersionEffectModel.name: VersionEffectModel,
    SpeculativeVersionEffectModel.name: SpeculativeVersionEffectModel,
    HierarchicalLatencyModel.name: HierarchicalLatencyModel,
}


def get_model_class(name: str) -> type[LatencyModel]:
    from ..errors import BadInput

    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise BadInput(f"unknown model '{name}'; available: {', '.join(MODEL_CLASSES)}",
                       argument="model") from None


__all__ = ["LatencyModel", "ModelInputs", "DenseLatencyModel", "SpeculativeLatencyModel", "MoELatencyModel", "VersionEffectModel",
           "SpeculativeVersionEffectModel",
           "HierarchicalLatencyModel", "MODEL_CLASSES",
           "get_model_class"]
