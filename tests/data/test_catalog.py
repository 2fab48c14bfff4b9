"""The model/GPU catalog: bundled cards, lookups, user overrides, malformed cards."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from bayesspec.data import catalog as cat_mod
from bayesspec.data.catalog import (
    Catalog,
    GpuCard,
    ModelCard,
    bundled_catalog_dir,
    default_catalog,
    load_catalog,
    normalize_name,
)
from bayesspec.errors import BadInput, CatalogError

BUNDLED = bundled_catalog_dir()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    """No $BAYESSPEC_CATALOG and an empty home, so only what a test adds is seen."""
    monkeypatch.delenv(cat_mod.ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    default_catalog.cache_clear()
    yield
    default_catalog.cache_clear()


@pytest.fixture
def cat() -> Catalog:
    return load_catalog(include_user=False)


VALID_LLM = """
name = "Toy-1B"
hf_id = "acme/Toy-1B"
aliases = ["toy"]
role = "verifier"
architecture = "dense"
target = ""
params_total_b = 1.0
params_active_b = 1.0
layers = 16
hidden_size = 2048
num_attention_heads = 16
num_kv_heads = 4
head_dim = 128
bytes_per_param = 2
experts_total = 0
experts_active = 0
notes = ""

[sources]
config = "https://example.org/config.json"
"""

VALID_MOE = """
name = "Toy-MoE"
hf_id = "acme/Toy-MoE"
role = "verifier"
architecture = "moe"
target = ""
params_total_b = 10.0
params_active_b = 1.5
layers = 16
hidden_size = 2048
num_attention_heads = 16
num_kv_heads = 4
head_dim = 128
bytes_per_param = 2
experts_total = 64
experts_active = 4

[sources]
config = "https://example.org/config.json"
"""

VALID_GPU = """
name = "L40S"
aliases = ["NVIDIA L40S"]
memory_gb = 48
hbm_bandwidth_gb_s = 864
peak_bf16_tflops = 362

[sources]
datasheet = "https://example.org/l40s.pdf"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def replace_line(text: str, key: str, new: str | None) -> str:
    """Replace (or, with None, drop) the line that sets ``key``."""
    out = []
    for line in text.splitlines():
        if line.split("=")[0].strip() == key:
            if new is not None:
                out.append(new)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------
# Bundled cards
# ------------------------------------------------------------------------------------

EXPECTED_MODELS = [
    "Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B", "Qwen3-30B-A3B",
    "Qwen3-235B-A22B", "Llama-3.1-8B", "Llama-3.1-70B", "gpt-oss-20b",
    "EAGLE3-Llama-3.1-8B", "EAGLE3-Llama-3.1-70B", "EAGLE3-Qwen3-8B", "EAGLE3-Qwen3-14B",
    "EAGLE3-Qwen3-32B", "EAGLE3-Qwen3-30B-A3B", "EAGLE3-Qwen3-235B-A22B",
]


def test_bundled_dir_is_the_repo_models_folder_in_a_checkout():
    assert BUNDLED.is_dir()
    assert (BUNDLED / "llm").is_dir() and (BUNDLED / "gpu").is_dir()


def test_every_bundled_card_loads(cat):
    files = sorted(BUNDLED.rglob("*.toml"))
    assert len(files) == len(cat.models) + len(cat.gpus)
    assert {m.name for m in cat.models} == set(EXPECTED_MODELS)
    assert {g.name for g in cat.gpus} == {"A100", "H100", "H200"}
    for card in (*cat.models, *cat.gpus):
        assert Path(card.path).is_file()
        assert card.sources, f"{card.name} has no sources"
        assert all(v.startswith("https://") for v in card.sources.values()), card.name


def test_bundled_cards_are_consistent(cat):
    for m in cat.models:
        assert isinstance(m, ModelCard)
        assert "config" in m.sources, m.name
        if m.architecture != "eagle3":
            assert "params" in m.sources, m.name
            assert m.hf_id, m.name
        assert m.num_attention_heads % m.num_kv_heads == 0
        assert m.params_active_b <= m.params_total_b
        if m.architecture == "eagle3":
            assert m.role == "drafter" and m.layers == 1
            target = cat.model(m.target)
            assert target.is_verifier
            assert m.hidden_size == target.hidden_size
    verifiers = {m.name for m in cat.verifiers}
    assert {"Qwen3-0.6B", "Qwen3-1.7B", "Llama-3.1-8B", "gpt-oss-20b"} <= verifiers
    drafters = {m.name for m in cat.drafters}
    assert {"Qwen3-0.6B", "Qwen3-1.7B", "Llama-3.1-8B"} <= drafters


def test_every_verifier_in_the_paper_grid_with_an_eagle_head_has_one(cat):
    for v in ["Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B",
              "Qwen3-30B-A3B", "Qwen3-235B-A22B"]:
        heads = cat.drafters_for(v)
        assert len(heads) == 1 and heads[0].architecture == "eagle3", v
    assert cat.drafters_for("gpt-oss-20b") == ()
    assert cat.model("EAGLE3-Llama-3.1-8B").hf_id == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_gpu_cards(cat):
    h100 = cat.gpu("H100")
    assert isinstance(h100, GpuCard)
    assert (h100.memory_gb, h100.hbm_bandwidth_gb_s, h100.peak_bf16_tflops) == (80, 3350, 989)
    assert cat.gpu("H200").memory_gb == 141 and cat.gpu("H200").hbm_bandwidth_gb_s == 4800
    assert cat.gpu("A100").peak_bf16_tflops == 312
    assert h100.hbm_bandwidth_bytes_s == pytest.approx(3.35e12)
    assert h100.peak_bf16_flops == pytest.approx(989e12)


# ------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------

def test_kv_bytes_per_token_llama_8b(cat):
    assert cat.model("Llama-3.1-8B").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_weight_bytes(cat):
    q = cat.model("Qwen3-8B")
    assert q.weight_bytes == pytest.approx(8.19e9 * 2)
    assert q.active_weight_bytes == q.weight_bytes
    moe = cat.model("Qwen3-30B-A3B")
    assert moe.active_weight_bytes == pytest.approx(moe.params_active_b * 1e9 * 2)
    assert moe.active_weight_bytes < moe.weight_bytes / 5


def test_gpt_oss_mixed_precision_figures(cat):
    oss = cat.model("gpt-oss-20b")
    assert oss.weight_bytes / 2**30 == pytest.approx(12.8, abs=0.2)  # the MXFP4 checkpoint
    assert oss.kv_bytes_per_token == 2 * 24 * 8 * 64 * 2  # bf16 KV cache
    assert oss.active_weight_bytes == pytest.approx(3.61e9 * 1.03)
    assert "MXFP4" in oss.notes


def test_optional_refinements_default_to_bytes_per_param(tmp_path):
    write(tmp_path / "llm" / "toy.toml", VALID_LLM.replace("bytes_per_param = 2",
                                                          "bytes_per_param = 1"))
    toy = load_catalog([tmp_path], include_user=False).model("toy")
    assert toy.kv_bytes_per_value is None and toy.active_bytes_per_param is None
    assert toy.kv_bytes_per_token == 2 * 16 * 4 * 128 * 1
    assert toy.active_weight_bytes == toy.weight_bytes == 1e9


def test_cards_are_hashable_and_frozen(cat):
    m = cat.model("Qwen3-8B")
    assert m in {m}
    with pytest.raises(AttributeError):
        m.layers = 1  # type: ignore[misc]


# ------------------------------------------------------------------------------------
# Lookups
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("query, name", [
    ("Qwen3-8B", "Qwen3-8B"),
    ("qwen3-8b", "Qwen3-8B"),
    ("QWEN3_8B", "Qwen3-8B"),
    ("Qwen/Qwen3-8B", "Qwen3-8B"),
    ("qwen/qwen3-8b", "Qwen3-8B"),
    ("Qwen3-8B-Instruct", "Qwen3-8B"),
    ("  Qwen3 8B ", "Qwen3-8B"),
    ("gpt-oss-20b", "gpt-oss-20b"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("GPT_OSS_20B", "gpt-oss-20b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("llama-3.1-8b-instruct", "Llama-3.1-8B"),
    ("Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B"),
    ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "EAGLE3-Llama-3.1-8B"),
    ("AngelSlim/Qwen3-8B_eagle3", "EAGLE3-Qwen3-8B"),
    ("angelslim/qwen3-8b-eagle3", "EAGLE3-Qwen3-8B"),
])
def test_model_lookup(cat, query, name):
    assert cat.model(query).name == name
    assert cat.find_model(query) is cat.model(query)


@pytest.mark.parametrize("query, name", [
    ("H100", "H100"), ("h100-sxm", "H100"), ("H100 SXM5 80GB", "H100"),
    ("NVIDIA H100 80GB HBM3", "H100"), ("h200", "H200"), ("NVIDIA H200", "H200"),
    ("a100_sxm4_80gb", "A100"), ("NVIDIA A100-SXM4-80GB", "A100"),
])
def test_gpu_lookup(cat, query, name):
    assert cat.gpu(query).name == name


def test_models_and_gpus_are_separate_namespaces(cat):
    assert cat.find_gpu("Qwen3-8B") is None
    assert cat.find_model("H100") is None
    assert "H100" in cat and "qwen3-8b" in cat and "nope" not in cat
    with pytest.raises(CatalogError, match="is a GPU, not a model"):
        cat.model("h100")
    with pytest.raises(CatalogError, match="not a GPU"):
        cat.gpu("Qwen3-8B")


def test_normalize_name():
    assert normalize_name(" Qwen3_8B ") == "qwen3-8b"
    assert normalize_name("H100 SXM5  80GB") == "h100-sxm5-80gb"
    assert normalize_name("a--b__c") == "a-b-c"


def test_unknown_model_suggests_close_names(cat):
    with pytest.raises(CatalogError) as err:
        cat.model("Qwen3-7B")
    msg = str(err.value)
    assert "\n" not in msg
    assert "unknown model 'Qwen3-7B'" in msg
    assert "did you mean" in msg and "Qwen3-8B" in msg
    assert isinstance(err.value, BadInput)


def test_unknown_gpu_suggests_close_names(cat):
    with pytest.raises(CatalogError) as err:
        cat.gpu("H10")
    msg = str(err.value)
    assert "\n" not in msg and "unknown GPU 'H10'" in msg and "H100" in msg


def test_unknown_name_without_close_match_lists_known_names(cat):
    with pytest.raises(CatalogError) as err:
        cat.gpu("TPU v5e")
    assert "known GPUs: A100, H100, H200" in str(err.value)


# ------------------------------------------------------------------------------------
# Search path, user cards, overrides
# ------------------------------------------------------------------------------------

def test_user_dir_adds_and_overrides(tmp_path):
    user = tmp_path / "cards"
    write(user / "llm" / "toy.toml", VALID_LLM)
    write(user / "gpu" / "l40s.toml", VALID_GPU)
    override = VALID_LLM.replace('name = "Toy-1B"', 'name = "Qwen3-8B"') \
        .replace('hf_id = "acme/Toy-1B"', 'hf_id = "Qwen/Qwen3-8B"') \
        .replace('aliases = ["toy"]', 'aliases = []') \
        .replace("layers = 16", "layers = 99")
    write(user / "llm" / "nested" / "deeper" / "qwen-fix.toml", override)

    c = load_catalog([user], include_user=False)
    assert c.model("toy").name == "Toy-1B"
    assert c.model("acme/toy-1b").layers == 16
    assert c.gpu("nvidia l40s").memory_gb == 48
    fixed = c.model("Qwen/Qwen3-8B")
    assert fixed.layers == 99 and "qwen-fix.toml" in fixed.path
    assert sum(m.name == "Qwen3-8B" for m in c.models) == 1
    # an override that drops an alias also drops the old card's alias
    assert c.find_model("Qwen3-8B-Instruct") is None
    # the bundled cards are still there
    assert c.model("gpt-oss-20b").experts_total == 32
    assert len(c.models) == len(EXPECTED_MODELS) + 1


def test_search_order_env_then_user_then_extra(tmp_path, monkeypatch):
    def card(layers: int) -> str:
        return VALID_LLM.replace("layers = 16", f"layers = {layers}")

    env1, env2 = tmp_path / "env1", tmp_path / "env2"
    write(env1 / "toy.toml", card(1))
    write(env2 / "toy.toml", card(2))
    home = Path(os.environ["HOME"])
    write(home / ".config" / "bayesspec" / "models" / "toy.toml", card(3))
    extra = write(tmp_path / "extra" / "toy.toml", card(4))

    monkeypatch.setenv(cat_mod.ENV_VAR, os.pathsep.join([str(env1), "", str(env2)]))
    assert load_catalog(include_user=False).model("toy").layers == 2
    assert load_catalog().model("toy").layers == 3
    assert load_catalog([tmp_path / "extra"]).model("toy").layers == 4
    assert load_catalog([extra]).model("toy").layers == 4  # a single file works too
    assert load_catalog(str(tmp_path / "extra")).model("toy").layers == 4


def test_default_catalog_is_cached_and_reads_env(tmp_path, monkeypatch):
    write(tmp_path / "toy.toml", VALID_LLM)
    monkeypatch.setenv(cat_mod.ENV_VAR, str(tmp_path))
    first = default_catalog()
    assert first.model("toy").name == "Toy-1B"
    assert default_catalog() is first
    default_catalog.cache_clear()
    monkeypatch.delenv(cat_mod.ENV_VAR)
    assert default_catalog().find_model("toy") is None


def test_missing_catalog_dir_is_an_error(tmp_path, monkeypatch):
    with pytest.raises(CatalogError, match="does not exist"):
        load_catalog([tmp_path / "nope"], include_user=False)
    monkeypatch.setenv(cat_mod.ENV_VAR, str(tmp_path / "nope-env"))
    with pytest.raises(CatalogError, match="nope-env"):
        load_catalog(include_user=False)


def test_missing_user_dir_is_fine():
    assert len(load_catalog().models) == len(EXPECTED_MODELS)


def test_kind_gpu_marks_a_gpu_card_outside_a_gpu_folder(tmp_path):
    write(tmp_path / "misc" / "l40s.toml", 'kind = "gpu"\n' + textwrap.dedent(VALID_GPU))
    c = load_catalog([tmp_path], include_user=False)
    assert c.gpu("L40S").hbm_bandwidth_gb_s == 864
    assert c.find_model("L40S") is None


def test_drafter_card_for_a_user_verifier(tmp_path):
    write(tmp_path / "llm" / "toy.toml", VALID_LLM)
    head = (VALID_LLM.replace('name = "Toy-1B"', 'name = "Toy-1B-EAGLE3"')
            .replace('hf_id = "acme/Toy-1B"', 'hf_id = "acme/Toy-1B-EAGLE3"')
            .replace('aliases = ["toy"]', "aliases = []")
            .replace('role = "verifier"', 'role = "drafter"')
            .replace('architecture = "dense"', 'architecture = "eagle3"')
            .replace('target = ""', 'target = "acme/toy-1b"')
            .replace("layers = 16", "layers = 1"))
    write(tmp_path / "llm" / "toy-head.toml", head)
    c = load_catalog([tmp_path], include_user=False)
    assert c.drafters_for("Toy-1B") == (c.model("Toy-1B-EAGLE3"),)


# ------------------------------------------------------------------------------------
# Malformed cards
# ------------------------------------------------------------------------------------

def _load_one(tmp_path: Path, text: str, sub: str = "llm", name: str = "bad.toml"):
    path = write(tmp_path / sub / name, text)
    with pytest.raises(CatalogError) as err:
        load_catalog([tmp_path], include_user=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(path) in msg and err.value.file == str(path)
    return err.value


BAD_LLM_CASES = [
    # (description, field, edit, fragment of the message)
    ("missing field", "layers", lambda t: replace_line(t, "layers", None), "missing"),
    ("missing sources", "sources", lambda t: t.split("[sources]")[0], "missing"),
    ("string for int", "layers", lambda t: replace_line(t, "layers", 'layers = "16"'),
     "must be an integer"),
    ("float for int", "head_dim", lambda t: replace_line(t, "head_dim", "head_dim = 128.0"),
     "must be an integer"),
    ("bool for number", "bytes_per_param",
     lambda t: replace_line(t, "bytes_per_param", "bytes_per_param = true"), "must be a number"),
    ("int for string", "name", lambda t: replace_line(t, "name", "name = 7"), "must be a string"),
    ("aliases not a list", "aliases",
     lambda t: replace_line(t, "aliases", 'aliases = "toy"'), "list of strings"),
    ("negative params", "params_total_b",
     lambda t: replace_line(t, "params_total_b", "params_total_b = -1.0"), "positive"),
    ("zero layers", "layers", lambda t: replace_line(t, "layers", "layers = 0"), "positive"),
    ("negative experts", "experts_total",
     lambda t: replace_line(t, "experts_total", "experts_total = -2"), "negative"),
    ("bad role", "role", lambda t: replace_line(t, "role", 'role = "judge"'), "one of"),
    ("bad architecture", "architecture",
     lambda t: replace_line(t, "architecture", 'architecture = "ssm"'), "one of"),
    ("typo in a field", "num_kv_head",
     lambda t: replace_line(t, "num_kv_heads", "num_kv_head = 4"), "num_kv_heads"),
    ("active above total", "params_active_b",
     lambda t: replace_line(t, "params_active_b", "params_active_b = 2.0"), "exceeds"),
    ("kv heads above heads", "num_kv_heads",
     lambda t: replace_line(t, "num_kv_heads", "num_kv_heads = 32"), "exceeds"),
    ("kv heads do not divide", "num_kv_heads",
     lambda t: replace_line(t, "num_kv_heads", "num_kv_heads = 3"), "multiple"),
    ("dense with experts", "experts_total",
     lambda t: replace_line(t, "experts_total", "experts_total = 8"), "no experts"),
    ("target on a verifier", "target",
     lambda t: replace_line(t, "target", 'target = "Qwen3-8B"'), "drafter"),
    ("bad sources", "sources", lambda t: t.replace('config = "https', "config = 1 #"),
     "table of strings"),
]


@pytest.mark.parametrize("desc, fld, edit, fragment", BAD_LLM_CASES,
                         ids=[c[0] for c in BAD_LLM_CASES])
def test_malformed_llm_card(tmp_path, desc, fld, edit, fragment):
    err = _load_one(tmp_path, edit(textwrap.dedent(VALID_LLM)))
    assert err.column == fld
    assert f"'{fld}'" in str(err) and fragment in str(err)


BAD_MOE_CASES = [
    ("active experts above total", "experts_active",
     lambda t: replace_line(t, "experts_active", "experts_active = 65"), "exceeds"),
    ("moe without experts", "experts_total",
     lambda t: replace_line(replace_line(t, "experts_total", "experts_total = 0"),
                            "experts_active", "experts_active = 0"), "needs experts_total"),
    ("moe without active experts", "experts_active",
     lambda t: replace_line(t, "experts_active", "experts_active = 0"), "needs experts_active"),
    ("moe using every weight", "params_active_b",
     lambda t: replace_line(t, "params_active_b", "params_active_b = 10.0"), "below"),
]


@pytest.mark.parametrize("desc, fld, edit, fragment", BAD_MOE_CASES,
                         ids=[c[0] for c in BAD_MOE_CASES])
def test_malformed_moe_card(tmp_path, desc, fld, edit, fragment):
    err = _load_one(tmp_path, edit(textwrap.dedent(VALID_MOE)))
    assert err.column == fld and fragment in str(err)


def test_valid_toy_cards_load(tmp_path):
    write(tmp_path / "llm" / "a.toml", VALID_LLM)
    write(tmp_path / "llm" / "b.toml", VALID_MOE)
    write(tmp_path / "gpu" / "c.toml", VALID_GPU)
    c = load_catalog([tmp_path], include_user=False)
    assert c.model("Toy-MoE").expert_fraction == pytest.approx(4 / 64)


def test_bad_toml(tmp_path):
    err = _load_one(tmp_path, 'name = "oops\nlayers = 3\n')
    assert "not valid TOML" in str(err) and "line" in str(err)


@pytest.mark.parametrize("edit, fld, fragment", [
    (lambda t: replace_line(t, "memory_gb", None), "memory_gb", "missing"),
    (lambda t: replace_line(t, "memory_gb", "memory_gb = -80"), "memory_gb", "positive"),
    (lambda t: replace_line(t, "peak_bf16_tflops", 'peak_bf16_tflops = "fast"'),
     "peak_bf16_tflops", "must be a number"),
    (lambda t: t + "\nlayers = 3\n", "layers", "unknown field"),
])
def test_malformed_gpu_card(tmp_path, edit, fld, fragment):
    text = edit(textwrap.dedent(VALID_GPU))
    if "layers = 3" in text:  # keep the extra key out of the [sources] table
        text = "layers = 3\n" + text.replace("\nlayers = 3\n", "\n")
    err = _load_one(tmp_path, text, sub="gpu")
    assert err.column == fld and fragment in str(err)


def test_eagle_head_needs_a_known_target(tmp_path):
    head = (textwrap.dedent(VALID_LLM)
            .replace('role = "verifier"', 'role = "drafter"')
            .replace('architecture = "dense"', 'architecture = "eagle3"'))
    err = _load_one(tmp_path, head)
    assert err.column == "target" and "must name the verifier" in str(err)

    misspelt = head.replace('target = ""', 'target = "Qwen3-8b-instrukt"')
    (tmp_path / "llm" / "bad.toml").write_text(misspelt, encoding="utf-8")
    with pytest.raises(CatalogError) as err2:
        load_catalog([tmp_path], include_user=False)
    assert err2.value.column == "target"
    assert "unknown target model" in str(err2.value) and "Qwen3-8B" in str(err2.value)


def test_duplicate_name_in_one_directory(tmp_path):
    write(tmp_path / "llm" / "a.toml", VALID_LLM)
    err = _load_one(tmp_path, VALID_LLM, name="b.toml")
    assert err.column == "name" and "also defined in" in str(err)


def test_private_x_fields_are_allowed(tmp_path):
    write(tmp_path / "llm" / "a.toml", 'x_owner = "me"\n' + textwrap.dedent(VALID_LLM))
    assert load_catalog([tmp_path], include_user=False).model("toy")


def test_catalog_imports_only_the_standard_library():
    import ast
    import sys

    tree = ast.parse(Path(cat_mod.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("bayesspec", "__future__"), n
