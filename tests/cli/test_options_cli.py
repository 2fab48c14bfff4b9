"""The model options on the command line: one spelling each, a misspelt name refused
with its near miss, ``fit --help`` pointing at ``bayesspec options``, and what "auto"
became printed once by ``fit`` and stored in the fit file."""

from __future__ import annotations

import json

from bayesspec.cli import main
from bayesspec.simulate.synthetic import generate_sweeps


def _sweeps(tmp_path, truth_16):
    source = tmp_path / "sweeps.csv"
    generate_sweeps(truth_16.iloc[:2], seed=5).to_csv(source, index=False)
    return source


def test_a_misspelt_option_exits_2_naming_the_near_miss(tmp_path, truth_16, capsys):
    source = _sweeps(tmp_path, truth_16)
    out = tmp_path / "fit.nc"
    code = main(["fit", str(source), "-o", str(out), "--option", "run_efect=shared"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len([x for x in lines if "error" in x]) == 1
    assert "option --option" in lines[-1] and "did you mean run_effect?" in lines[-1]
    assert not out.exists()
    # a flag's option has one spelling: the flag
    code = main(["fit", str(source), "-o", str(out), "--option", "decode_profile=p.csv"])
    assert code == 2 and "given as --decode-profile" in capsys.readouterr().err
    # and the same flag on check --ppc's refits and on sbc, refused where a model cannot
    code = main(["sbc", "--model", "speculative", "--cap-prior", "wide",
                 "--simulations", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "option --cap-prior" in err and "does not take cap_prior" in err


def test_fit_help_points_to_the_options_verb(capsys):
    try:
        main(["fit", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert "bayesspec options --model M" in text
    assert "non_centred" not in text and "cell_c2_deviations" not in text


def test_fit_prints_and_stores_what_auto_became(tmp_path, truth_16, capsys, mock_sampling):
    from bayesspec.bayes import load_fit
    from bayesspec.bayes.options import resolved_options

    source = _sweeps(tmp_path, truth_16)
    out = tmp_path / "fit.nc"
    code = main(["fit", str(source), "-o", str(out), "--draws", "20", "--tune", "20",
                 "--chains", "2", "--json", "--no-loo"])
    captured = capsys.readouterr()
    assert code in (0, 3), captured.err
    said = [x for x in captured.err.splitlines() if x.startswith("auto options:")]
    assert said == ["auto options: noise_load_at = curve (no decode-profile chain)"]
    assert json.loads(captured.out)["resolved_options"] == {"noise_load_at": "curve"}
    fit = load_fit(out)
    assert resolved_options(fit) == {"noise_load_at": {"value": "curve",
                                                       "why": "no decode-profile chain"}}
    assert fit.model().resolved == resolved_options(fit)
