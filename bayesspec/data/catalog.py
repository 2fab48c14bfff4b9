"""The model/GPU catalog: LLM cards and GPU cards kept as TOML files.

A *card* is one TOML file describing one LLM (a verifier, a drafter, or both) or one GPU.
The bundled cards live in ``models/`` at the repository root and ship inside the wheel as
``bayesspec/_catalog_cards``.  Users add or override cards by dropping TOML files into a
directory named by ``--catalog DIR`` (``extra_dirs``), by ``$BAYESSPEC_CATALOG`` (one or
more directories separated by ``os.pathsep``), or in ``~/.config/bayesspec/models``.

Search order (a later card with the same name replaces an earlier one):

1. the bundled cards;
2. each directory in ``$BAYESSPEC_CATALOG``, in order;
3. ``~/.config/bayesspec/models`` (only with ``include_user=True``);
4. ``extra_dirs``, in order.

Cards are found recursively (``**/*.toml``).  A card is a GPU card if it sits under a
folder named ``gpu`` (relative to the directory searched) or says ``kind = "gpu"``;
otherwise it is an LLM card.  See ``models/README.md`` for the fields.

Lookups are case-insensitive over the card's name, its Hugging Face id and its aliases,
and treat ``_``, spaces and ``-`` alike.

This module imports only the standard library, so that it works from a bare install.
The module is kept whole because the card fields, their checks and the lookups are one
file format and its one reader.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from bayesspec.errors import CatalogError

__all__ = [
    "ENV_VAR",
    "Catalog",
    "GpuCard",
    "ModelCard",
    "bundled_catalog_dir",
    "default_catalog",
    "kv_cache_tokens_estimate",
    "load_catalog",
    "normalize_name",
    "user_catalog_dir",
]

#: Environment variable naming extra catalog directories (``os.pathsep``-separated).
ENV_VAR = "BAYESSPEC_CATALOG"

ROLES = ("verifier", "drafter", "both")
ARCHITECTURES = ("dense", "moe", "eagle3")
KINDS_LLM = ("llm", "model")
KIND_GPU = "gpu"


# ---------------------------------------------------------------------------------------
# Cards
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCard:
    """One LLM: a verifier, a drafter (a small dense model or an EAGLE-3 head), or both.

    Sizes are in billions of parameters; ``bytes_per_param`` is the (effective) storage
    size of one weight.  ``kv_bytes_per_value`` and ``active_bytes_per_param`` are
    optional refinements for checkpoints whose weights are not all stored in one format
    (gpt-oss ships MXFP4 experts but keeps attention and the KV cache in bf16); when a
    card leaves them out they equal ``bytes_per_param``.
    """

    name: str
    hf_id: str
    aliases: tuple[str, ...]
    role: str
    architecture: str
    target: str
    params_total_b: float
    params_active_b: float
    layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    bytes_per_param: float
    experts_total: int
    experts_active: int
    notes: str
    sources: dict = field(compare=False, hash=False)
    path: str = field(compare=False, hash=False)
    kv_bytes_per_value: float | None = None
    active_bytes_per_param: float | None = None

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (``experts_total > 0``)."""
        return self.experts_total > 0

    @property
    def is_drafter(self) -> bool:
        return self.role in ("drafter", "both")

    @property
    def is_verifier(self) -> bool:
        return self.role in ("verifier", "both")

    @property
    def expert_fraction(self) -> float:
        """m/M, the share of experts each token is routed to (0 for a dense model)."""
        return self.experts_active / self.experts_total if self.experts_total else 0.0

    @property
    def weight_bytes(self) -> float:
        """All weights, in bytes: ``params_total_b * 1e9 * bytes_per_param``."""
        return self.params_total_b * 1e9 * self.bytes_per_param

    @property
    def active_weight_bytes(self) -> float:
        """Weights one token touches, in bytes: ``params_active_b * 1e9 * bytes/param``."""
        per = self.bytes_per_param if self.active_bytes_per_param is None else self.active_bytes_per_param
        return self.params_active_b * 1e9 * per

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token: ``2 * layers * num_kv_heads * head_dim * bytes``."""
        per = self.bytes_per_param if self.kv_bytes_per_value is None else self.kv_bytes_per_value
        return 2 * self.layers * self.num_kv_heads * self.head_dim * per

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the card answers to: name, hf_id and aliases."""
        return tuple(n for n in (self.name, self.hf_id, *self.aliases) if n)


@dataclass(frozen=True)
class GpuCard:
    """One GPU: memory, HBM bandwidth and dense (no sparsity) bf16 tensor throughput."""

    name: str
    aliases: tuple[str, ...]
    memory_gb: float
    hbm_bandwidth_gb_s: float
    peak_bf16_tflops: float
    sources: dict = field(compare=False, hash=False)
    path: str = field(compare=False, hash=False)
    notes: str = ""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def hbm_bandwidth_bytes_s(self) -> float:
        return self.hbm_bandwidth_gb_s * 1e9

    @property
    def peak_bf16_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# ---------------------------------------------------------------------------------------
# Engine memory
# ---------------------------------------------------------------------------------------

#: vLLM's defaults for the share of HBM it takes, and what it keeps back from the KV
#: cache for activations and CUDA graphs (GB).
GPU_MEMORY_UTILIZATION = 0.9
ACTIVATION_RESERVE_GB = 3.0


def kv_cache_tokens_estimate(verifier: "ModelCard", gpu: "GpuCard",
                             drafter: "ModelCard | None" = None, *,
                             gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                             reserve_gb: float = ACTIVATION_RESERVE_GB) -> float | None:
    """KV-cache tokens that fit next to the weights on one GPU, vLLM style; None when the
    weights alone do not fit (tensor parallelism, which the cards do not know).

    vLLM takes ``gpu_memory_utilization`` of HBM, subtracts the weights and activation /
    CUDA-graph memory (``reserve_gb``), and fills the rest with KV blocks; a drafter's
    weights and its own KV per token come out of the same pool.
    """
    weights = verifier.weight_bytes + (drafter.weight_bytes if drafter is not None else 0.0)
    free = gpu.memory_gb * 1e9 * gpu_memory_utilization - weights - reserve_gb * 1e9
    per_token = verifier.kv_bytes_per_token + (drafter.kv_bytes_per_token if drafter else 0.0)
    if free <= 0 or per_token <= 0:
        return None
    return float(free // per_token)


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------

_SEP = re.compile(r"[\s_\-]+")


def normalize_name(name: str) -> str:
    """Lower-case, with runs of spaces, ``_`` and ``-`` folded into one ``-``."""
    return _SEP.sub("-", str(name).strip().lower()).strip("-")


# ---------------------------------------------------------------------------------------
# Field schema and validation
# ---------------------------------------------------------------------------------------

# kind: "str" | "int" | "float" | "names" (list of strings) | "table" (string -> string)
_MODEL_FIELDS: dict[str, tuple[str, bool]] = {  # field -> (kind, required)
    "name": ("str", True),
    "hf_id": ("str", True),
    "aliases": ("names", False),
    "role": ("str", True),
    "architecture": ("str", True),
    "target": ("str", True),
    "params_total_b": ("float", True),
    "params_active_b": ("float", True),
    "layers": ("int", True),
    "hidden_size": ("int", True),
    "num_attention_heads": ("int", True),
    "num_kv_heads": ("int", True),
    "head_dim": ("int", True),
    "bytes_per_param": ("float", True),
    "experts_total": ("int", True),
    "experts_active": ("int", True),
    "notes": ("str", False),
    "sources": ("table", True),
    "kv_bytes_per_value": ("float", False),
    "active_bytes_per_param": ("float", False),
    "kind": ("str", False),
}

_GPU_FIELDS: dict[str, tuple[str, bool]] = {
    "name": ("str", True),
    "aliases": ("names", False),
    "memory_gb": ("float", True),
    "hbm_bandwidth_gb_s": ("float", True),
    "peak_bf16_tflops": ("float", True),
    "notes": ("str", False),
    "sources": ("table", True),
    "kind": ("str", False),
}

_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "names": "a list of strings",
    "table": "a table of strings (key = \"value\")",
}


def _toml_type(value: Any) -> str:
    return {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string",
        list: "a list", dict: "a table",
    }.get(type(value), type(value).__name__)


class _Card:
    """Validation helper bound to one file."""

    def __init__(self, path: Path, data: dict, schema: dict[str, tuple[str, bool]], what: str):
        self.path = path
        self.data = data
        self.schema = schema
        self.what = what

    def fail(self, message: str, fld: str | None = None) -> CatalogError:
        return CatalogError(message, file=str(self.path), column=fld)

    def check_keys(self) -> None:
        for key in self.data:
            if key in self.schema or key.startswith("x_"):
                continue
            close = difflib.get_close_matches(key, list(self.schema), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise self.fail(f"unknown field in a {self.what} card{hint} "
                            f"(prefix private fields with 'x_')", key)
        for key, (_, required) in self.schema.items():
            if required and key not in self.data:
                raise self.fail(f"missing required field of a {self.what} card", key)

    def get(self, key: str) -> Any:
        kind, required = self.schema[key]
        if key not in self.data:
            return {"str": "", "names": (), "table": {}}.get(kind) if not required else None
        value = self.data[key]
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "names": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "table": isinstance(value, dict)
            and all(isinstance(v, str) for v in value.values()),
        }[kind]
        if not ok:
            raise self.fail(f"must be {_TYPE_WORDS[kind]}, got {_toml_type(value)} "
                            f"{_short_repr(value)}", key)
        if kind == "float":
            value = float(value)
            if not math.isfinite(value):
                raise self.fail(f"must be a finite number, got {value}", key)
        if kind == "str":
            value = value.strip()
        if kind == "names":
            value = tuple(v.strip() for v in value if v.strip())
        if kind == "table":
            value = dict(value)
        return value

    def positive(self, key: str) -> Any:
        value = self.get(key)
        if value is not None and value <= 0:
            raise self.fail(f"must be positive, got {value}", key)
        return value

    def non_negative(self, key: str) -> Any:
        value = self.get(key)
        if value is not None and value < 0:
            raise self.fail(f"must not be negative, got {value}", key)
        return value

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        value = self.get(key)
        if value not in options:
            raise self.fail(f"must be one of {', '.join(repr(o) for o in options)}, "
                            f"got {value!r}", key)
        return value

    def nonempty(self, key: str) -> str:
        value = self.get(key)
        if not value:
            raise self.fail("must not be empty", key)
        return value


def _short_repr(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_model(path: Path, data: dict) -> ModelCard:
    c = _Card(path, data, _MODEL_FIELDS, "model")
    c.check_keys()
    name = c.nonempty("name")
    role = c.choice("role", ROLES)
    architecture = c.choice("architecture", ARCHITECTURES)
    target = c.get("target")
    total = c.positive("params_total_b")
    active = c.positive("params_active_b")
    layers = c.positive("layers")
    hidden = c.positive("hidden_size")
    heads = c.positive("num_attention_heads")
    kv_heads = c.positive("num_kv_heads")
    head_dim = c.positive("head_dim")
    bpp = c.positive("bytes_per_param")
    experts_total = c.non_negative("experts_total")
    experts_active = c.non_negative("experts_active")
    kv_bpv = c.positive("kv_bytes_per_value")
    active_bpp = c.positive("active_bytes_per_param")
    kind = c.get("kind")
    if kind and kind not in KINDS_LLM:
        raise c.fail(f"must be 'llm' in a model card (or 'gpu' for a GPU card), got {kind!r}",
                     "kind")

    if active > total:
        raise c.fail(f"params_active_b ({active:g}) exceeds params_total_b ({total:g})",
                     "params_active_b")
    if kv_heads > heads:
        raise c.fail(f"num_kv_heads ({kv_heads}) exceeds num_attention_heads ({heads})",
                     "num_kv_heads")
    if heads % kv_heads:
        raise c.fail(f"num_attention_heads ({heads}) is not a multiple of num_kv_heads "
                     f"({kv_heads})", "num_kv_heads")
    if experts_active > experts_total:
        raise c.fail(f"experts_active ({experts_active}) exceeds experts_total "
                     f"({experts_total})", "experts_active")
    if architecture == "moe":
        if experts_total == 0:
            raise c.fail("architecture 'moe' needs experts_total > 0", "experts_total")
        if experts_active == 0:
            raise c.fail("architecture 'moe' needs experts_active > 0", "experts_active")
        if not active < total:
            raise c.fail("a MoE model activates fewer parameters than it has: "
                         "params_active_b must be below params_total_b", "params_active_b")
    else:
        if experts_total or experts_active:
            field_name = "experts_total" if experts_total else "experts_active"
            raise c.fail(f"architecture '{architecture}' has no experts: set experts_total "
                         f"and experts_active to 0, or architecture = \"moe\"", field_name)
        if not math.isclose(active, total, rel_tol=1e-9):
            raise c.fail(f"a non-MoE model uses all its weights: params_active_b ({active:g}) "
                         f"must equal params_total_b ({total:g})", "params_active_b")
    if architecture == "eagle3":
        if role != "drafter":
            raise c.fail("an EAGLE-3 head can only be a drafter (role = \"drafter\")", "role")
        if not target:
            raise c.fail("an EAGLE-3 head must name the verifier it drafts for", "target")
    if target and role == "verifier":
        raise c.fail("only drafter cards name a target; leave it \"\" for a verifier",
                     "target")

    return ModelCard(
        name=name,
        hf_id=c.get("hf_id"),
        aliases=c.get("aliases"),
        role=role,
        architecture=architecture,
        target=target,
        params_total_b=total,
        params_active_b=active,
        layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        bytes_per_param=bpp,
        experts_total=experts_total,
        experts_active=experts_active,
        notes=c.get("notes"),
        sources=c.get("sources"),
        path=str(path),
        kv_bytes_per_value=kv_bpv,
        active_bytes_per_param=active_bpp,
    )


def _parse_gpu(path: Path, data: dict) -> GpuCard:
    c = _Card(path, data, _GPU_FIELDS, "GPU")
    c.check_keys()
    kind = c.get("kind")
    if kind and kind != KIND_GPU:
        raise c.fail(f"a card under a 'gpu' folder must be a GPU card (kind = \"gpu\"), "
                     f"got {kind!r}", "kind")
    return GpuCard(
        name=c.nonempty("name"),
        aliases=c.get("aliases"),
        memory_gb=c.positive("memory_gb"),
        hbm_bandwidth_gb_s=c.positive("hbm_bandwidth_gb_s"),
        peak_bf16_tflops=c.positive("peak_bf16_tflops"),
        sources=c.get("sources"),
        path=str(path),
        notes=c.get("notes"),
    )


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"not valid TOML: {exc}", file=str(path)) from None
    except OSError as exc:
        raise CatalogError(f"cannot read card: {exc.strerror or exc}", file=str(path)) from None


def _is_gpu_card(path: Path, root: Path, data: dict) -> bool:
    kind = data.get("kind")
    if isinstance(kind, str) and kind.strip():
        return kind.strip().lower() == KIND_GPU
    try:
        parts = path.relative_to(root).parts[:-1]
    except ValueError:
        parts = ()
    return any(p.lower() == KIND_GPU for p in parts)


def _card_files(source: Path) -> list[tuple[Path, Path]]:
    """(file, root) pairs for one catalog source, sorted for a stable order."""
    if source.is_file():
        return [(source, source.parent)]
    return [(p, source) for p in sorted(source.rglob("*.toml")) if p.is_file()]


# ---------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------


class Catalog:
    """A set of model and GPU cards with forgiving lookups."""

    def __init__(self, models: Iterable[ModelCard] = (), gpus: Iterable[GpuCard] = (),
                 sources: Iterable[str] = ()):
        self._models = tuple(models)
        self._gpus = tuple(gpus)
        self.sources = tuple(sources)
        self._model_index = _build_index(self._models)
        self._gpu_index = _build_index(self._gpus)

    # -- listings ------------------------------------------------------------------------
    @property
    def models(self) -> tuple[ModelCard, ...]:
        return self._models

    @property
    def gpus(self) -> tuple[GpuCard, ...]:
        return self._gpus

    @property
    def verifiers(self) -> tuple[ModelCard, ...]:
        return tuple(m for m in self._models if m.is_verifier)

    @property
    def drafters(self) -> tuple[ModelCard, ...]:
        return tuple(m for m in self._models if m.is_drafter)

    # -- lookups -------------------------------------------------------------------------
    def find_model(self, name: str) -> ModelCard | None:
        return self._model_index.get(normalize_name(name))

    def find_gpu(self, name: str) -> GpuCard | None:
        return self._gpu_index.get(normalize_name(name))

    def model(self, name: str) -> ModelCard:
        card = self.find_model(name)
        if card is None:
            if self.find_gpu(name) is not None:
                raise CatalogError(f"{name!r} is a GPU, not a model (LLM)")
            raise CatalogError(_unknown("model", name, self._model_index, self._models))
        return card

    def gpu(self, name: str) -> GpuCard:
        card = self.find_gpu(name)
        if card is None:
            if self.find_model(name) is not None:
                raise CatalogError(f"{name!r} is a model (LLM), not a GPU")
            raise CatalogError(_unknown("GPU", name, self._gpu_index, self._gpus))
        return card

    def drafters_for(self, verifier: str) -> tuple[ModelCard, ...]:
        """Drafter heads whose ``target`` is ``verifier`` (any of its names)."""
        v = self.model(verifier)
        return tuple(m for m in self._models
                     if m.target and self.find_model(m.target) is v)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.find_model(name) is not None
                                          or self.find_gpu(name) is not None)

    def __len__(self) -> int:
        return len(self._models) + len(self._gpus)

    def __repr__(self) -> str:
        return f"Catalog({len(self._models)} models, {len(self._gpus)} GPUs)"


def _build_index(cards: Iterable[Any]) -> dict[str, Any]:
    """Normalised name -> card; a card's own name outranks another card's alias."""
    index: dict[str, Any] = {}
    cards = tuple(cards)
    for card in cards:  # aliases and ids first ...
        for n in card.names[1:]:
            index[normalize_name(n)] = card
    for card in cards:  # ... then names, which win any clash
        index[normalize_name(card.name)] = card
    return index


def _unknown(what: str, name: str, index: Mapping[str, Any], cards: tuple) -> str:
    key = normalize_name(name)
    close = difflib.get_close_matches(key, list(index), n=6, cutoff=0.6)
    picks: list[str] = []
    for k in close:
        display = index[k].name
        if display not in picks:
            picks.append(display)
    if picks:
        hint = "did you mean " + ", ".join(repr(p) for p in picks[:3]) + "?"
    elif cards:
        listed = ", ".join(c.name for c in cards[:12]) + (", ..." if len(cards) > 12 else "")
        hint = f"known {what}s: {listed}"
    else:
        hint = f"the catalog has no {what} cards"
    return (f"unknown {what} {name!r}; {hint} "
            f"(add a card: see models/README.md, or pass --catalog DIR)")


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def bundled_catalog_dir() -> Path:
    """Where the bundled cards are: ``bayesspec/_catalog_cards`` in a wheel, else
    ``<repo>/models`` in a source checkout."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "_catalog_cards"
    if packaged.is_dir():
        return packaged
    return package.parent / "models"


def user_catalog_dir() -> Path:
    """``~/.config/bayesspec/models``."""
    return Path.home() / ".config" / "bayesspec" / "models"


def _env_dirs() -> list[Path]:
    raw = os.environ.get(ENV_VAR, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def load_catalog(extra_dirs: Iterable[str | os.PathLike] = (), *,
                 include_user: bool = True) -> Catalog:
    """Load the bundled cards, then ``$BAYESSPEC_CATALOG``, the user folder and
    ``extra_dirs``; a later card with the same name replaces an earlier one.

    ``extra_dirs`` may also name single ``.toml`` files.  A directory named on the command
    line or in ``$BAYESSPEC_CATALOG`` must exist; the user folder is optional.
    Raises :class:`~bayesspec.errors.CatalogError` for a missing directory or a
    malformed card.
    """
    if isinstance(extra_dirs, (str, os.PathLike)):
        extra_dirs = (extra_dirs,)
    bundled = bundled_catalog_dir()
    layers: list[tuple[Path, str]] = []
    if bundled.is_dir():
        layers.append((bundled, "bundled"))
    for d in _env_dirs():
        layers.append((d, f"${ENV_VAR}"))
    if include_user:
        user = user_catalog_dir()
        if user.is_dir():
            layers.append((user, "user"))
    for d in extra_dirs:
        layers.append((Path(d).expanduser(), "--catalog"))

    models: dict[str, ModelCard] = {}
    gpus: dict[str, GpuCard] = {}
    for source, origin in layers:
        if not source.exists():
            raise CatalogError(f"catalog directory does not exist (from {origin})",
                               file=str(source))
        seen_here: dict[tuple[str, str], str] = {}
        for path, root in _card_files(source):
            data = _read_toml(path)
            if _is_gpu_card(path, root, data):
                card: ModelCard | GpuCard = _parse_gpu(path, data)
                kind, store = "gpu", gpus
            else:
                card = _parse_model(path, data)
                kind, store = "model", models
            key = (kind, normalize_name(card.name))
            if key in seen_here:
                raise CatalogError(f"{kind} card '{card.name}' is also defined in "
                                   f"{seen_here[key]}", file=str(path), column="name")
            seen_here[key] = str(path)
            store.pop(key[1], None)  # re-insert so the override sorts last
            store[key[1]] = card

    catalog = Catalog(models.values(), gpus.values(), sources=[str(s) for s, _ in layers])
    for card in catalog.models:
        if card.target and catalog.find_model(card.target) is None:
            raise CatalogError(_unknown("target model", card.target,
                                        catalog._model_index, catalog.models),
                               file=card.path, column="target")
        if card.target and catalog.find_model(card.target) is card:
            raise CatalogError("a drafter cannot target itself", file=card.path,
                               column="target")
    return catalog


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The catalog with the default search path, loaded once (``cache_clear()`` to reload)."""
    return load_catalog()
