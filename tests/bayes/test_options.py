"""Model options declared once (bayes.options): every model's configuration comes from
the declarations, each value is checked by its type, a misspelt or foreign option is
refused in one line with its near miss, ``bayesspec options`` lists them, and
``docs/options.md`` is the declarations' page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bayesspec.bayes import MODEL_CLASSES
from bayesspec.bayes.options import (EVERY, OPTIONS, OPTIONS_LIST, REMOVED, RENAMED, TIERS,
                                     markdown, resolved_line, takes, upgrade_stored)
from bayesspec.cli import main
from bayesspec.errors import FitFileError

ROOT = Path(__file__).resolve().parents[2]


def test_every_model_configuration_is_its_declared_options():
    """A model's configuration holds the options it takes, at their declared defaults,
    plus those of the class whose code it inherits; every declared option is taken by a
    registered model and every model name in a declaration is registered."""
    assert set(EVERY) == set(MODEL_CLASSES)
    for name, model_class in MODEL_CLASSES.items():
        config = model_class.default_config
        for option in takes(name):
            assert config[option] == OPTIONS[option].default_for(name), (name, option)
        assert set(config) <= set(OPTIONS), name
    for option in OPTIONS_LIST:
        assert option.tier in TIERS and option.description and option.models
        assert set(option.models) <= set(MODEL_CLASSES), option.name
        for model in option.models:
            option.kind.check(option.name, option.default_for(model))  # defaults are valid


def test_at_most_fifteen_user_options_across_models():
    user = [o.name for o in OPTIONS_LIST if o.tier == "user"]
    assert 0 < len(user) <= 15, user


def test_the_hierarchical_coefficient_names_are_the_models():
    from bayesspec.bayes.hierarchical import SYSTEM_COEFFICIENTS
    from bayesspec.bayes.options import SYSTEM_COEFFICIENTS as declared

    assert declared == SYSTEM_COEFFICIENTS


@pytest.mark.parametrize("model, config, needle", [
    ("dense", {"cap_prio": "catalog"}, "did you mean cap_prior?"),
    ("tails", {"metric": ["p99"]}, "did you mean metrics?"),
    ("dense-spline", {"cap_prior": "wide"}, "does not take cap_prior (an option of dense, tails)"),
    ("speculative", {"run_effect": "shared"}, "does not take run_effect"),
    ("dense", {"run_effect": "sometimes"}, "run_effect must be none | shared"),
    ("dense", {"run_effect_share": 1.0}, "run_effect_share must be a number in [0, 1)"),
    ("dense", {"prefill_batching": 1}, "prefill_batching must be true | false | auto"),
    ("tails", {"metrics": ["p99", "p999"]}, "metrics must be a list of"),
    ("hierarchical", {"conditional_points_per_cell": 1}, "null or an integer >= 2"),
    ("hierarchical", {"centred_deviations": ["c2x"]}, "auto or a list of c1p"),
    ("tails", {"summary_run": "shared"}, "summary_run was removed"),
    ("moe", {"token_offset": 1.0}, "now called moe_token_offset"),
    ("moe", {"share_logit_scale": 1.0}, "now called moe_share_logit_scale"),
])
def test_a_bad_option_is_one_line_naming_it(model, config, needle):
    with pytest.raises(ValueError) as error:
        MODEL_CLASSES[model](config)
    message = str(error.value)
    assert needle in message and "\n" not in message


def test_the_same_option_keeps_one_meaning_and_values_are_normalised():
    """moe and the speculative models read eq. (4)'s token offset under one name, and the
    dense-roofline share prior keeps its own; a list becomes a tuple, an integer a float."""
    assert MODEL_CLASSES["moe"]({"moe_token_offset": 1}).config["moe_token_offset"] == 1.0
    assert "moe_token_offset" in MODEL_CLASSES["speculative"].default_config
    assert "share_logit_scale" not in MODEL_CLASSES["moe"].default_config
    model = MODEL_CLASSES["tails"]({"metrics": ["p99"]})
    assert model.config["metrics"] == ("p99",)


def test_a_stored_configuration_reads_back_under_todays_names():
    stored = {"token_offset": 1.0, "share_logit_scale": 2.0, "holdout_mask": False,
              "noise_base_median": 0.02}
    assert upgrade_stored("moe", stored) == {"moe_token_offset": 1.0,
                                             "moe_share_logit_scale": 2.0,
                                             "noise_base_median": 0.02}
    # the dense-roofline option of that name is its own
    assert upgrade_stored("dense-roofline", {"share_logit_scale": 2.0}) == {
        "share_logit_scale": 2.0}
    assert set(REMOVED) == {"holdout_mask", "summary_run", "count_stretch"}
    assert not set(RENAMED.values()) - set(OPTIONS)
    with pytest.raises(FitFileError, match="summary_run=shared"):
        upgrade_stored("tails", {"summary_run": "shared"})


def test_auto_resolves_once_and_is_said():
    """The dense model records what its "auto" options became; the line names each."""
    model = MODEL_CLASSES["dense"]()
    assert model.config["noise_load_at"] == "curve"
    assert model.resolved == {"noise_load_at": {"value": "curve",
                                                "why": "no decode-profile chain"}}
    line = resolved_line(model.resolved)
    assert line == "auto options: noise_load_at = curve (no decode-profile chain)"
    assert resolved_line({}) is None


def test_holdout_mask_is_an_argument_not_an_option():
    assert MODEL_CLASSES["dense"](holdout_mask=True).holdout_mask
    with pytest.raises(ValueError, match="holdout_mask was removed"):
        MODEL_CLASSES["dense"]({"holdout_mask": True})
    with pytest.raises(ValueError, match="does not refit"):
        MODEL_CLASSES["speculative"](holdout_mask=True)


def test_options_verb_lists_every_option_as_json(capsys):
    assert main(["options", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    names = [o["name"] for o in document["options"]]
    assert sorted(names) == sorted(OPTIONS)
    for entry in document["options"]:
        assert {"name", "tier", "type", "default", "description", "models"} <= set(entry)
    assert main(["options", "--model", "speculative", "--json"]) == 0
    speculative = json.loads(capsys.readouterr().out)["options"]
    assert [o["name"] for o in speculative] != names
    assert {o["name"] for o in speculative} == set(takes("speculative"))
    assert main(["options", "--model", "dense-spline", "--json"]) == 0
    spline = {o["name"]: o for o in json.loads(capsys.readouterr().out)["options"]}
    assert spline["utilisation_logit_mean"]["default"] == 0.0


def test_options_verb_text_and_bad_model(capsys):
    assert main(["options", "--model", "tails"]) == 0
    out = capsys.readouterr().out
    assert "user:" in out and "tail_law = power" in out and "--cap-prior" in out
    assert main(["options", "--model", "tail"]) == 2
    assert "unknown model 'tail'" in capsys.readouterr().err


def test_options_page_is_current():
    """docs/options.md is `bayesspec options --markdown` (regenerate it after a change)."""
    assert (ROOT / "docs" / "options.md").read_text() == markdown()
