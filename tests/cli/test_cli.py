"""Every CLI verb: JSON shapes of CONTRACT.md, tables, exit codes, atomic outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayesspec.cli import main, parse_list
from bayesspec.simulate.synthetic import generate_sweeps

UNCERTAIN_KEYS = {"mean", "median", "lo", "hi", "prob"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def is_uncertain(value) -> bool:
    return isinstance(value, dict) and UNCERTAIN_KEYS <= set(value) and \
        value["lo"] <= value["median"] <= value["hi"]


def test_parse_list_forms():
    assert parse_list("1,2,5").tolist() == [1.0, 2.0, 5.0]
    assert np.allclose(parse_list("0:1:0.25"), [0, 0.25, 0.5, 0.75, 1.0])
    for bad in ("a,b", "1:0:1", "1:2", "", "1:5:0"):
        with pytest.raises(Exception) as info:
            parse_list(bad)
        assert "--rps" in str(info.value)


def test_every_verb_has_help(capsys):
    from bayesspec.cli import verbs

    names = verbs()
    assert {"demo", "fit", "summary", "predict", "speedup", "crossover", "kstar", "check",
            "compare", "compare-models", "sbc", "simulate", "ingest", "serve"} <= set(names)
    for verb in names:
        with pytest.raises(SystemExit) as info:
            main([verb, "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0, verb
        assert out.startswith(f"usage: bayesspec {verb}"), verb
        # every option says what it is for
        assert "--json" in out or verb in {"serve", "demo", "simulate", "ingest"}, verb


def test_help_through_the_console_entry_point():
    result = subprocess.run([sys.executable, "-m", "bayesspec", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "speedup" in result.stdout


def test_summary_json_shape(capsys, real_fit_path):
    code, out, err = run(capsys, "summary", str(real_fit_path), "--json")
    assert code == 0
    document = json.loads(out)
    assert document["model"] == "dense"
    assert len(document["groups"]) == 16
    for group in document["groups"]:
        assert is_uncertain(group["C1"]) and is_uncertain(group["C2"])
        assert group["C1"]["prob"] == 0.9
        assert {"verifier", "prefill_tokens", "decode_tokens"} <= set(group)
    assert set(document["diagnostics"]) >= {"rhat_max", "ess_bulk_min", "divergences"}
    assert all(is_uncertain(u) for u in document["coefficients"].values())


def test_summary_prob_option_and_table(capsys, real_fit_path):
    code, out, _ = run(capsys, "summary", str(real_fit_path), "--json", "--prob", "0.5")
    narrow = json.loads(out)["groups"][0]["C2"]
    code, out, _ = run(capsys, "summary", str(real_fit_path), "--json")
    wide = json.loads(out)["groups"][0]["C2"]
    assert narrow["prob"] == 0.5 and wide["hi"] - wide["lo"] > narrow["hi"] - narrow["lo"]
    code, out, _ = run(capsys, "summary", str(real_fit_path))
    assert code == 0
    assert "C1 (s)" in out and "diagnostics:" in out and "Qwen3-14B p512 g512" in out


def test_predict_json_shape_and_monotone(capsys, real_fit_path):
    code, out, err = run(capsys, "predict", str(real_fit_path), "--rps", "0.5,2,4",
                         "--prefill", "512", "--decode", "512", "--json")
    assert code == 0, err
    document = json.loads(out)
    points = document["points"]
    assert [p["rps"] for p in points] == [0.5, 2.0, 4.0]
    assert all(is_uncertain(p["latency_s"]) for p in points)
    medians = [p["latency_s"]["median"] for p in points]
    assert medians == sorted(medians)
    # a new measurement is less certain than the mean curve
    assert all(p["predictive_s"]["hi"] - p["predictive_s"]["lo"]
               >= p["latency_s"]["hi"] - p["latency_s"]["lo"] for p in points)


def test_predict_past_saturation_is_null_not_a_number(capsys, real_fit_path):
    code, out, _ = run(capsys, "predict", str(real_fit_path), "--rps", "1000",
                       "--prefill", "256", "--decode", "256", "--json")
    point = json.loads(out)["points"][0]
    assert point["p_saturated"] == 1.0
    assert point["latency_s"]["median"] is None  # JSON has no infinity


def test_predict_needs_group_options_when_ambiguous(capsys, real_fit_path):
    code, out, err = run(capsys, "predict", str(real_fit_path), "--rps", "1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--prefill" in err and "--decode" in err
    code, _, err = run(capsys, "predict", str(real_fit_path), "--rps", "1",
                       "--verifier", "nope", "--prefill", "512", "--decode", "512")
    assert code == 2 and "no fitted group" in err


@pytest.mark.parametrize("argv, needle", [
    (["summary", "missing.nc"], "no such fit file"),
    (["predict", "missing.nc", "--rps", "1"], "no such fit file"),
    (["summary", "{fit}", "--prob", "1.5"], "--prob"),
    (["predict", "{fit}", "--rps", "x", "--prefill", "512", "--decode", "512"], "--rps"),
])
def test_bad_options_exit_2_with_one_line(capsys, real_fit_path, argv, needle):
    argv = [a.replace("{fit}", str(real_fit_path)) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("bayesspec: error:") and err.count("\n") == 1 and needle in err


def test_a_file_that_is_not_a_fit_is_refused(capsys, tmp_path):
    junk = tmp_path / "junk.nc"
    junk.write_bytes(b"\x89HDF\r\n\x1a\nnot really")
    code, _, err = run(capsys, "summary", str(junk))
    assert code == 2 and "junk.nc" in err and "Traceback" not in err


def test_a_fit_from_another_model_version_is_refused(capsys, real_fit_path, tmp_path):
    from bayesspec.bayes import load_fit

    fit = load_fit(real_fit_path)
    fit.tree.attrs["bayesspec_model_version"] = "0"
    other = tmp_path / "old.nc"
    fit.save(other)
    code, _, err = run(capsys, "summary", str(other))
    assert code == 2 and "version" in err and "refit" in err


def test_fit_verb_end_to_end(tmp_path, truth_16, capsys, mock_sampling):
    """The `fit` verb on prior draws: JSON only on stdout, file written and readable."""
    data = generate_sweeps(truth_16.iloc[:3], seed=5)
    source = tmp_path / "sweeps.csv"
    data.to_csv(source, index=False)
    out = tmp_path / "fit.nc"
    code, stdout, stderr = run(capsys, "fit", str(source), "-o", str(out), "--draws", "50",
                               "--tune", "50", "--chains", "2", "--seed", "1", "--json")
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["groups"] == 3 and document["excluded"] == 3
    assert out.exists()
    code, stdout, _ = run(capsys, "summary", str(out), "--json")
    assert code == 0 and len(json.loads(stdout)["groups"]) == 3
    # which rows were set aside, and why, one line each
    assert "3 of 27 points set aside (not in the likelihood)" in stderr
    assert stderr.count("throughput run (clients sending back to back") == 3
    assert [entry["reason"] for entry in document["set_aside"]] == [
        "throughput run (clients sending back to back, to find the ceiling): no set rate, "
        "not a point of the law"] * 3
    assert all(data["rps"].iloc[entry["row"] - 1] == entry["rps"]
               for entry in document["set_aside"])
    listing = [p.name for p in tmp_path.iterdir()]
    assert not [name for name in listing if name.endswith(".tmp")]


def test_fit_says_which_unmarked_points_the_numbers_set_aside(tmp_path, capsys,
                                                            mock_sampling):
    """A minimal CSV (no saturated/strategy columns) with a throughput point: fit sets it
    aside, says so on stderr and in the JSON; --no-saturation-detection keeps it."""
    from bayesspec.simulate import setup, sweep

    rows = sweep(setup("Qwen3-8B", "H100", prefill=512, decode=512), 9, n_requests=400,
                 seed=0).rows
    source = tmp_path / "minimal.csv"
    rows[["verifier", "prefill_tokens", "decode_tokens", "rps", "latency_mean_s"]].to_csv(
        source, index=False)
    throughput_row = int(rows.index[rows["strategy"].eq("throughput")][0]) + 1
    code, stdout, stderr = run(capsys, "fit", str(source), "-o", str(tmp_path / "f.nc"),
                               "--draws", "20", "--tune", "20", "--chains", "2", "--json")
    assert code == 0, stderr
    aside = json.loads(stdout)["set_aside"]
    assert throughput_row in [entry["row"] for entry in aside]
    assert f"row {throughput_row} (" in stderr and "law through the group" in stderr
    code, stdout, _ = run(capsys, "fit", str(source), "-o", str(tmp_path / "g.nc"),
                          "--draws", "20", "--tune", "20", "--chains", "2", "--json",
                          "--no-saturation-detection")
    assert code == 0 and json.loads(stdout)["set_aside"] == []


def test_fit_option_sets_the_model_configuration(tmp_path, truth_16, capsys,
                                                 mock_sampling):
    """--option KEY=VALUE reaches the model (kept in the fit file); an option the model
    does not have, or a value it refuses, is a one-line error with exit 2, no file."""
    from bayesspec.bayes import load_fit

    source = tmp_path / "sweeps.csv"
    generate_sweeps(truth_16.iloc[:2], seed=5).to_csv(source, index=False)
    out = tmp_path / "fit.nc"
    code, stdout, stderr = run(capsys, "fit", str(source), "-o", str(out), "--draws", "20",
                               "--tune", "20", "--chains", "2", "--json",
                               "--option", "noise_base_median=0.02")
    assert code == 0, stderr
    assert json.loads(stdout)["options"] == {"noise_base_median": 0.02}
    assert load_fit(out).model_config["noise_base_median"] == 0.02
    for model, option in (("dense", "no_such_option=1"), ("dense", "novalue"),
                          ("hierarchical", "conditional_points_per_cell=1"),
                          ("hierarchical", "cell_c2_deviations=centred"),
                          ("hierarchical", "centred_deviations=c2x"),
                          ("hierarchical", "conditional_subsample_rows=-1")):
        bad = tmp_path / "bad.nc"
        code, _, err = run(capsys, "fit", str(source), "-o", str(bad), "--model", model,
                           "--option", option)
        last = err.strip().splitlines()[-1]
        assert code == 2 and last.startswith("bayesspec: error: option --option")
        assert not bad.exists()


def test_fit_to_missing_folder_fails_before_sampling(capsys, tmp_path, truth_16):
    source = tmp_path / "sweeps.csv"
    generate_sweeps(truth_16.iloc[:1], seed=5).to_csv(source, index=False)
    code, _, err = run(capsys, "fit", str(source), "-o", str(tmp_path / "no" / "fit.nc"))
    assert code == 2 and "output folder does not exist" in err


@pytest.mark.long
def test_demo_quick_writes_fits_decisions_and_figures(tmp_path, capsys, mock_sampling):
    """The demo's plumbing (two fits, summaries, figures, deployment lines) on prior draws;
    real fits of the same models are tested in test_dense_model / test_speculative and
    the README walkthrough."""
    from bayesspec.cli.demo_job import run_demo

    out = tmp_path / "demo"
    assert run_demo(out=str(out), quick=True, as_json=True) == 0
    document = json.loads(capsys.readouterr().out)
    assert Path(document["dense"]["fit"]).exists()
    assert Path(document["speculative"]["fit"]).exists()
    assert document["dense"]["groups"] == 64 and document["speculative"]["setups"] == 2
    names = {Path(f).name for f in document["figures"]}
    # a smoke run draws one page of the 64 groups' panels, and every other figure
    assert {"collapse.png", "dense_group_fits_1.png", "kstar_map.png",
            "cost_ratios.png"} <= names and "dense_group_fits_2.png" not in names
    assert all(Path(f).stat().st_size > 10_000 for f in document["figures"])
    assert all(Path(f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in document["figures"])
    decisions = document["speculative"]["decisions"]
    assert decisions and all({"alpha", "rps", "k", "p_best", "speedup"} <= set(d)
                             for d in decisions)
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["lines"] and "diagnostics" in deployment
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_demo_quick_really_runs(tmp_path):
    """`bayesspec demo --quick` with real sampling, as `make demo` runs it (slow: two real
    fits and their compilation)."""
    out = tmp_path / "demo"
    result = subprocess.run([sys.executable, "-m", "bayesspec", "demo", "--quick", "--out",
                             str(out), "--json"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    deployment = json.loads((out / "deployment.json").read_text())
    assert any("run k =" in line for line in deployment["lines"])
    assert "warning" not in document["dense"], document["dense"]["warning"]


# ---------------------------------- what a user reads: errors, help, warnings, the demo

def test_a_truncated_fit_file_is_said_to_be_truncated_in_whole_words(real_fit_path, tmp_path,
                                                                    capsys):
    cut = tmp_path / "cut.nc"
    cut.write_bytes(real_fit_path.read_bytes()[:20000])
    code, _, err = run(capsys, "summary", str(cut))
    line = err.strip().splitlines()[-1]
    assert code == 2 and "the fit file is truncated (20000 bytes)" in line
    assert "copy it again, or refit" in line and "sblock" not in line
    from bayesspec.inference.fitfile import _first_words

    assert _first_words("Unable to synchronously open file (truncated file: eof = 20000, "
                        "sblock->base_addr = 0)", 60) == ("Unable to synchronously open file "
                                                         "(truncated file: eof ...")


def test_a_data_table_given_as_a_fit_file_says_to_fit_it_first(tmp_path, capsys, truth_16):
    table = tmp_path / "sweeps.csv"
    generate_sweeps(truth_16.iloc[:1], seed=1).to_csv(table, index=False)
    for verb in (["summary", str(table)], ["predict", str(table), "--rps", "1"]):
        code, _, err = run(capsys, *verb)
        assert code == 2 and "a data table, not a fit file" in err
        assert "`bayesspec fit sweeps.csv -o fit.nc`" in err


def test_fit_help_names_the_default_model(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: dense)" in text


def test_prior_predictive_check_gives_a_verdict_without_pymcs_own_line(tmp_path, capfd,
                                                                      truth_16):
    table = tmp_path / "sweeps.csv"
    generate_sweeps(truth_16.iloc[:2], seed=1).to_csv(table, index=False)
    code = main(["check", str(table), "--model", "dense", "--prior-predictive"])
    out, err = capfd.readouterr()
    assert code == 0
    assert "the priors admit the data" in out
    assert "Sampling: [" not in out + err
    from bayesspec.checks import prior_verdict

    assert prior_verdict(0.5, 10)["verdict"].startswith("PRIORS EXCLUDE THE DATA")
    assert not prior_verdict(0.5, 10)["admits"] and prior_verdict(0.96, 10)["admits"]


def test_compare_models_keeps_the_pareto_k_warning(real_fit, capsys):
    """A fit whose data hold one point far off its curve (the posterior did not see it
    there): that point's Pareto k is high, which the comparison must say (ArviZ 1's
    table no longer carries a warning column)."""
    from bayesspec import checks
    from bayesspec.inference.fitfile import Fit

    fit, data = real_fit
    moved = data.copy()
    row = moved.index[~moved["excluded"]][40]
    moved.loc[row, "latency_mean_s"] *= 3.0
    model = fit.model()
    model.build(moved)
    tree = fit.tree.copy()
    for child in ("log_likelihood", "fit_data"):
        if child in tree.children:
            del tree[child]
    off = Fit.from_sampling(model, moved, tree)
    document = checks.compare_models({"fit": fit, "off": off})
    rows = {row["name"]: row for row in document["models"]}
    assert rows["off"]["warning"] and rows["off"]["pareto_k_bad"] >= 1
    assert "PSIS-LOO is unreliable for" in document["verdict"]
    assert "of off" in document["verdict"] and "compare by refits" in document["verdict"]


def test_the_demo_speedup_figure_draws_and_marks_the_recommended_k():
    """The deployment summary says 'alpha 0.8, RPS 15.35: run k = 3'; the figure at alpha
    0.8 must draw k = 3 (not among 1, 2, 4, 6, 8) and mark it, not k* at another rate."""
    from bayesspec.cli.demo_job import figure_ks

    decisions = [{"setup": "S", "alpha": 0.6, "rps": 5.1, "k": 5},
                 {"setup": "S", "alpha": 0.8, "rps": 15.35, "k": 3},
                 {"setup": "S", "alpha": 0.8, "rps": 5.1, "k": 7},
                 {"setup": "T", "alpha": 0.8, "rps": 20.0, "k": 9}]
    ks, recommended = figure_ks(decisions, "S", 0.8, middle=2)
    assert recommended == 3 and {3, 7} <= set(ks) and 5 not in ks and 9 not in ks
    dense = [{"setup": "S", "alpha": 0.8, "rps": 15.35, "k": 0}]
    assert figure_ks(dense, "S", 0.8, middle=2)[1] == 0      # "do not speculate", marked
    assert figure_ks([], "S", 0.8, middle=2) == ([1, 2, 4, 6, 8], 2)


def test_version_prints_the_package_version_on_stdout(capsys):
    import bayesspec
    from bayesspec.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"bayesspec {bayesspec.__version__}"
