"""bayesspec: Bayesian latency laws for speculative decoding in LLM serving.

The public Python interface (imported lazily: ``import bayesspec`` stays fast, PyMC loads
on first use)::

    import bayesspec as bs

    data = bs.read_tidy("sweeps.csv")                      # validated tidy rows
    fit = bs.fit(data, "speculative")                      # posterior (a Fit)
    fit.save("fit.nc"); fit = bs.load_fit("fit.nc")
    law = fit.law({"prefill": 512, "decode": 512})         # the prediction contract
    bs.speedup_curve(law, alpha=0.8, k=3, rps=[1, 5, 10])  # CONTRACT `speedup` document
    bs.kstar_table(law, alphas=[0.7, 0.8], rps=[1, 10])    # best k per (alpha, RPS)

Model classes (``bs.DenseLatencyModel`` and the others, ``bs.MODEL_CLASSES``) follow
the model-builder pattern: ``build(data)``, ``fit(data)``, ``save(path)``,
``load(path)``, ``predict(rps, **group)``, with a versioned identity. ``bs.laws`` holds
every formula (CONTRACT.md).
"""

from importlib import import_module

# name -> module that defines it
_PUBLIC = {
    "read_tidy": "data", "prepare": "data", "SaturationRule": "data",
    "fit": "bayes.workflow", "Fit": "inference.fitfile", "SamplerSettings": "inference",
    "load_fit": "bayes", "get_model_class": "bayes", "MODEL_CLASSES": "bayes",
    "LatencyModel": "bayes", "DenseLatencyModel": "bayes", "SpeculativeLatencyModel": "bayes",
    "MoELatencyModel": "bayes", "HierarchicalLatencyModel": "bayes",
    "VersionEffectModel": "bayes", "SpeculativeVersionEffectModel": "bayes",
    "Curve": "prediction", "MoECurve": "prediction", "Law": "prediction",
    "CoefficientLaw": "prediction", "ConfigurationLaw": "prediction", "Noise": "prediction",
    "predict_group": "decisions", "speedup_curve": "decisions", "crossover": "decisions",
    "kstar_table": "decisions", "compare_fits": "decisions", "compare_versions": "decisions",
    "uncertain": "uncertainty", "BadInput": "errors", "ConvergenceWarning": "errors",
}
# name -> module path: the subpackages, and the modules older code reached by short names
_MODULES = {
    "laws": "laws", "data": "data", "datasets": "datasets", "simulate": "simulate",
    "ingest": "ingest", "prediction": "prediction", "inference": "inference",
    "bayes": "bayes", "decisions": "decisions", "checks": "checks", "loadtest": "loadtest",
    "reporting": "reporting", "plots": "reporting.plots", "sbc": "checks.sbc",
    "validation": "checks.replicates", "synthetic": "simulate.synthetic",
    "catalog": "data.catalog",
}

__all__ = ["__version__", *_PUBLIC, *_MODULES]


def _installed_version() -> str:
    # importlib.metadata costs 60 ms at import: paid only by what records the version
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bayesspec")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0+src"


def __getattr__(name: str):
    if name == "__version__":
        globals()["__version__"] = value = _installed_version()
        return value
    if name in _PUBLIC:
        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    if name in _MODULES:
        return import_module(f".{_MODULES[name]}", __name__)
    raise AttributeError(f"module 'bayesspec' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


def lazy_export(package: dict, submodules: tuple[str, ...], name: str):
    """``name`` of a sub-package whose ``__init__`` re-exports its submodules' names on
    first use: a submodule of that name, else the first of ``submodules`` that defines it
    (cached in the package). ``package`` is the sub-package's ``globals()``."""
    from importlib.util import find_spec

    if name.startswith("__"):
        raise AttributeError(name)
    here = package["__name__"]
    if find_spec(f"{here}.{name}") is not None:  # a submodule, never a same-named value
        return import_module(f"{here}.{name}")
    for submodule in submodules:
        module = import_module(f"{here}.{submodule}")
        if hasattr(module, name):
            package[name] = value = getattr(module, name)
            return value
    raise AttributeError(f"module {here!r} has no attribute {name!r}")
