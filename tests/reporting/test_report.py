"""report: one self-contained page per set of fits (HTML, Markdown), composed from the
decision documents; the Fit's notebook API; the page in a real headless browser."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from bayesspec.cli import main
from bayesspec.data import prepare
from bayesspec.inference import SamplerSettings
from bayesspec.reporting.pages import report_document, write_report
from bayesspec.simulate.synthetic import generate_sweeps, speculative_truth
from bayesspec.bayes.workflow import fit as fit_model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# src= or href= pointing off the page (anything but an inline data: URI or an anchor)
REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?!data:|#)[a-z][a-z0-9+.-]*:""", re.I)


@pytest.fixture(scope="module")
def speculative_fit_path(tmp_path_factory):
    """A small real speculative fit: dense + k = 1, 2, 4 at alpha 0.6, 0.8 from the law."""
    data = prepare(generate_sweeps(speculative_truth(alphas=(0.6, 0.8), ks=(1, 2, 4)), seed=3),
                   source="spec.csv")
    # 1500 tuning steps: with 1000, a fresh install (2026-12-06: pytensor 3.3.8, nutpie
    # 0.16.11) left C1 at R-hat 1.013, and the report rightly said NOT CONVERGED
    settings = SamplerSettings(draws=1000, tune=1500, chains=4, seed=1, progress=False)
    path = tmp_path_factory.mktemp("report") / "spec.nc"
    fit_model(data, "speculative", settings=settings).save(path)
    return path


def _html_checks(text: str) -> None:
    assert text.lstrip().lower().startswith("<!doctype html>")
    assert not REMOTE.search(text), REMOTE.search(text).group(0)
    assert not re.search(r"<(script|link)[^>]+(src|href)=[\"']?https?:", text, re.I)
    for name in ("Decision", "Key numbers", "Figures", "What is extrapolated",
                 "Convergence and misfit", "Data provenance", "Reproduce"):
        assert name in text, name


def test_speculative_report_is_self_contained_and_in_order(speculative_fit_path, tmp_path,
                                                            capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(speculative_fit_path), "-o", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    text = out.read_text()
    _html_checks(text)
    # figures inline: speedup bands, k* map, collapse, predictive check
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) >= 4
    assert all(base64.b64decode(image)[:8] == b"\x89PNG\r\n\x1a\n" for image in images)
    # the sections come in reading order: the decision first, how to reproduce it last
    order = [text.index(f'id="{name}"') for name in
             ("decision", "numbers", "figures", "extrapolated", "convergence", "provenance",
              "reproduce")]
    assert order == sorted(order)
    decision = text[order[0]:order[1]]
    assert re.search(r"run k = \d", decision) and "RPS" in decision
    # the verdict, the provenance and the commands
    assert "converged" in text[order[4]:order[5]]
    assert "spec.csv" in text[order[5]:order[6]]
    assert f"bayesspec kstar {speculative_fit_path}" in text
    assert "bayesspec fit spec.csv --model speculative" in text
    assert "NOT CONVERGED" not in text
    assert result["output"] == str(out) and result["decision"]
    # the numbers on the page are the decision documents' own
    from bayesspec.bayes import load_fit
    from bayesspec.decisions import kstar_table
    from bayesspec.reporting.pages import _rates, interval

    fit = load_fit(speculative_fit_path)
    law = fit.law()
    row = kstar_table(law, [0.6], _rates(law))["table"][0]
    assert interval(row["speedup"]) in text


def test_markdown_report_writes_its_figures_beside_it(speculative_fit_path, tmp_path):
    out = tmp_path / "r.md"
    assert main(["report", str(speculative_fit_path), "-o", str(out)]) == 0
    text = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) >= 4
    for link in links:
        assert not link.startswith(("http", "/")) and (tmp_path / link).stat().st_size > 1000
    assert text.startswith("## Decision report")
    assert "| alpha | RPS | k* |" in text
    assert "```sh\nbayesspec fit spec.csv --model speculative" in text
    # a table row has as many cells as its header
    table = [line for line in text.splitlines() if line.startswith("| alpha | RPS | k*")]
    assert table


def test_unconverged_fit_says_so_at_the_top(dense_fit_factory, tmp_path):
    unmixed = dense_fit_factory(n_groups=2, chain_shift={"C2": 1.3})
    assert not unmixed.diagnostics["converged"]
    for suffix in ("html", "md"):
        out = tmp_path / f"bad.{suffix}"
        write_report([unmixed], ["bad.nc"], str(out))
        text = out.read_text()
        first = text.index("NOT CONVERGED")
        assert first < text.index("Decision\n" if suffix == "md" else 'id="decision"')
        assert "R-hat" in text[first:first + 2000]


def test_dense_fit_report_states_the_costs(real_fit_path, tmp_path):
    out = tmp_path / "dense.html"
    assert main(["report", str(real_fit_path), "-o", str(out)]) == 0
    text = out.read_text()
    _html_checks(text)
    assert "saturating at" in text and "Fitted costs per group" in text
    assert "MISFIT" not in text or "MISFIT flagged" in text


def test_slo_targets_need_a_tails_fit_and_bad_output_is_refused(real_fit_path, tmp_path,
                                                                capsys):
    target = tmp_path / "r.html"
    assert main(["report", str(real_fit_path), "-o", str(target), "--ttft-p99", "0.1"]) == 2
    assert main(["report", str(real_fit_path), "-o", str(tmp_path / "r.pdf")]) == 2
    assert main(["report", str(real_fit_path), "-o", str(tmp_path / "no" / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "tails" in err[0]
    assert not target.exists()


def test_tails_fit_page_has_the_slo(mock_sampling, tmp_path):
    """Plumbing (prior draws stand in for the posterior): SLO table and figure."""
    from bayesspec.data import read_tidy

    path = tmp_path / "slo.csv"
    assert main(["simulate", "--grid", str(Path(__file__).parents[2] / "examples" / "slo.toml"),
                 "--requests", "200", "-o", str(path), "--quiet"]) == 0
    fitted = fit_model(read_tidy(path), "tails",
                       settings=SamplerSettings(draws=50, tune=50, chains=2, seed=1,
                                                progress=False))
    document = report_document([fitted], ["tails.nc"], slo_targets={"ttft_p99": 0.08})
    section = document["sections"][0]
    assert any("SLO" in line for line in section["decision"])
    assert any(table["title"].endswith("(TTFT p99 <= 0.08 s)") or "goodput" in table["title"]
               for table in section["tables"])
    assert any(figure["name"] == "slo" for figure in section["figures"])
    # the predictive check asks the mean and each fitted summary
    inside = section["misfit"]["inside"]
    assert inside.startswith("mean: held-in") and "; ttft_p99: held-in" in inside
    # each decision names the objective it answers, and the page reconciles the two
    assert all(line.startswith(("For mean latency, ", "For the SLO on percentiles ("))
               for line in section["decision"])
    assert sum(line.startswith("For the SLO") for line in section["decision"]) == 1
    mean_k = {choice["k"] for choice in section["choices"]
              if choice["objective"] == "mean latency" and choice["alpha"] == 0.8}
    assert len(mean_k) == 1 and document["reconciled"]
    sentence = document["reconciled"][0]
    assert f"for mean latency, {pages_k_name(mean_k.pop())}; for the SLO on percentiles" \
        in sentence
    assert sentence.endswith(("both objectives recommend the same configuration.",
                              "the mean's where mean latency is what counts."))


def pages_k_name(k) -> str:
    from bayesspec.reporting.pages import _k_name

    return _k_name(k)


def test_reconciling_says_when_the_objectives_agree_and_when_not():
    from bayesspec.reporting.pages import MEAN_OBJECTIVE, _reconciled

    key = (("verifier", "V"), ("prefill", "512"), ("decode", "512"))
    mean = {"setup": key, "label": "V 512/512", "alpha": 0.8, "objective": MEAN_OBJECTIVE,
            "k": 3, "configuration": "k = 3"}
    slo = {"setup": key, "label": "V", "alpha": None, "objective": "the SLO on percentiles "
           "(TTFT p99 <= 0.08 s)", "alphas": [0.8], "segments": [(3, 1.0, 9.0)]}
    sections = [{"name": "fit.nc", "choices": [mean]}, {"name": "tails.nc", "choices": [slo]}]
    agree = _reconciled(sections)
    assert agree == ["V 512/512 at alpha 0.8: for mean latency, k = 3 (fit.nc); for the SLO "
                     "on percentiles (TTFT p99 <= 0.08 s) (tails.nc), k = 3 from 1 to 9 RPS: "
                     "both objectives recommend the same configuration."]
    slo["segments"] = [(4, 1.0, 5.0), (None, 6.0, 9.0)]
    differ = _reconciled(sections)[0]
    assert "k = 4 from 1 to 5 RPS, nothing meets it from 6 to 9 RPS" in differ
    assert "they answer different objectives" in differ
    # another alpha, or another setup, is not the same decision
    assert not _reconciled([{"name": "a", "choices": [dict(mean, alpha=0.7)]},
                            {"name": "b", "choices": [slo]}])
    assert not _reconciled([{"name": "a", "choices": [mean]},
                            {"name": "b", "choices": [dict(slo, setup=key[:1])]}])


def test_decision_names_the_measured_k_and_quotes_its_own_crossover(speculative_fit_path):
    """One sentence per measured alpha; it recommends a measured k (1, 2 or 4 here) or
    dense, quotes that k's crossover, and where k* over every k is a k never measured,
    says to measure it before relying on it."""
    from bayesspec.bayes import load_fit
    from bayesspec.decisions import crossover, kstar_table
    from bayesspec.reporting.pages import _rates, interval

    fit = load_fit(speculative_fit_path)
    law = fit.law()
    section = report_document([fit], [str(speculative_fit_path)])["sections"][0]
    sentences = section["decision"]
    assert len(sentences) == 2
    rates = _rates(law)
    for alpha, sentence in zip((0.6, 0.8), sentences):
        assert sentence.startswith(f"For mean latency, {law.label} at alpha {alpha:g}: ")
        assert sentence.count(". ") == 0 and sentence.endswith(".")
        match = re.search(r"run k = (\d+) \(measured\)", sentence)
        if match is None:
            assert "do not speculate" in sentence
            continue
        k = int(match.group(1))
        assert k in (1, 2, 4)
        star = crossover(law, alpha, k)
        if star["rps_star"] is not None and star["p_crossover"] >= 0.5:
            assert f"SD with k = {k} " in sentence and interval(star["rps_star"]) in sentence
            assert ("extrapolated:" in sentence.split("RPS*")[1]) == star["extrapolated"]
        full = kstar_table(law, [alpha], rates)["table"]
        unmeasured = {row["k"] for row in full if row["k"] not in (0, 1, 2, 4)}
        if unmeasured:
            assert re.search(r"measure k = (\d+) before relying on it", sentence)
            assert int(re.search(r"measure k = (\d+)", sentence).group(1)) in unmeasured
        else:
            assert "before relying on it" not in sentence


def test_measure_next_shows_the_planner_when_it_is_there(dense_fit_factory, tmp_path,
                                                        monkeypatch):
    import bayesspec.reporting.pages as pages

    fit = dense_fit_factory(n_groups=1)
    out = tmp_path / "r.md"
    write_report([fit], ["f.nc"], str(out))
    text = out.read_text()
    assert "### Measure next" in text and "**f.nc: ceiling**" in text
    assert "bayesspec plan f.nc --question ceiling" in text
    # the planner's own answer, as `plan` gives it
    from bayesspec.loadtest.planning import plan, question_from_fit

    expected = plan(question_from_fit(fit, "ceiling"), top=5)
    if expected["settled"]:
        assert "Settled: no more load points" in text
    else:
        first = expected["next"][0].document()
        assert f"| {first['k']} | {first['alpha']} | {pages.number(first['rps'])} |" in text
        assert "guidellm" in text
    # without the planner the section is left out
    real = pages.importlib.util.find_spec
    monkeypatch.setattr(pages.importlib.util, "find_spec",
                        lambda name, *a: None if name.endswith("planning") else real(name, *a))
    write_report([fit], ["f.nc"], str(out))
    assert "Measure next" not in out.read_text()


# --------------------------------------------------------------------------------------
# Notebook API on Fit
# --------------------------------------------------------------------------------------

def test_fit_repr_summary_and_plots(speculative_fit_path):
    import matplotlib.figure
    from bayesspec.bayes import load_fit

    fit = load_fit(speculative_fit_path)
    text = repr(fit)
    assert "speculative model" in text and f"{len(fit.groups)} groups" in text
    assert "rows" in text and ("converged" in text or "NOT CONVERGED" in text)
    table = fit.summary()
    assert list(table.index) == fit.groups["label"].tolist()
    assert {"C1", "C1_lo", "C1_hi", "C2", "saturation_rps", "rps_measured_max"} <= \
        set(table.columns)
    assert (table["C1_lo"] < table["C1"]).all() and (table["C1"] < table["C1_hi"]).all()
    narrow = fit.summary(prob=0.5)
    assert ((narrow["C2_hi"] - narrow["C2_lo"]) < (table["C2_hi"] - table["C2_lo"])).all()
    assert table.attrs["prob"] == 0.9
    html = fit._repr_html_()
    assert "<table" in html and "speculative" in html
    for figure in (fit.plot_collapse(), fit.plot_speedup(0.8), fit.plot_kstar(),
                   fit.plot_groups()[0]):
        assert isinstance(figure, matplotlib.figure.Figure)


def test_unconverged_repr_says_so(dense_fit_factory):
    unmixed = dense_fit_factory(n_groups=2, chain_shift={"C2": 1.3})
    assert "NOT CONVERGED" in repr(unmixed)
    assert "NOT CONVERGED" in unmixed._repr_html_()


# --------------------------------------------------------------------------------------
# A real headless browser (Chromium from the OS packages)
# --------------------------------------------------------------------------------------

def load_in_chromium(url: str, *, timeout: float = 90.0, width: int = 1200,
                     height: int = 1600) -> tuple[list[dict], bytes]:
    """Open ``url`` in headless Chromium driven over the DevTools protocol (a pipe, no
    network port): every event it reports, and a PNG screenshot of the viewport."""
    read_commands, write_commands = os.pipe()
    read_events, write_events = os.pipe()

    def child():  # the browser reads commands on fd 3 and writes events on fd 4
        a, b = os.dup(read_commands), os.dup(write_events)
        os.dup2(a, 3)
        os.dup2(b, 4)
        os.set_inheritable(3, True)
        os.set_inheritable(4, True)

    profile = tempfile.mkdtemp(prefix="bayesspec-chromium-")
    process = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-pipe",
         f"--window-size={width},{height}", "about:blank"],
        preexec_fn=child, close_fds=False, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    os.close(read_commands)
    os.close(write_events)
    buffer, events, replies, counter = b"", [], {}, [0]
    deadline = time.monotonic() + timeout

    def pump(done):
        nonlocal buffer
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            if not select.select([read_events], [], [], min(left, 0.5))[0]:
                continue
            chunk = os.read(read_events, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                (replies.__setitem__(message["id"], message) if "id" in message
                 else events.append(message))

    def call(method, params=None, session=None):
        counter[0] += 1
        number = counter[0]
        message = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(write_commands, json.dumps(message).encode() + b"\0")
        pump(lambda: number in replies)
        if "error" in replies[number]:
            raise RuntimeError(f"{method}: {replies[number]['error']}")
        return replies[number]["result"]

    try:
        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target,
                                                 "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            call(f"{domain}.enable", session=session)
        call("Page.navigate", {"url": url}, session=session)
        pump(lambda: any(e.get("method") == "Page.loadEventFired" for e in events))
        settle = time.monotonic() + 1.0
        pump(lambda: time.monotonic() > settle)
        shot = call("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        try:
            call("Browser.close")
        except (RuntimeError, TimeoutError):
            pass
    finally:
        os.close(write_commands)
        os.close(read_events)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(profile, ignore_errors=True)
    return events, base64.b64decode(shot)


def page_problems(events: list[dict], page: str) -> list[str]:
    """Console errors and warnings, uncaught exceptions, error log entries, and any
    request other than the page itself or inline data."""
    problems = []
    for event in events:
        method, params = event.get("method", ""), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning",
                                                                            "assert"):
            problems.append(f"console {params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            problems.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            problems.append(f"log: {params['entry'].get('text')}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if url != page and not url.startswith("data:"):
                problems.append(f"request: {url}")
        elif method == "Network.loadingFailed":
            problems.append(f"failed load: {params.get('errorText')}")
    return problems


def _non_blank(png: bytes) -> float:
    """Share of pixels that are not the background colour of the screenshot."""
    import io

    import matplotlib.image

    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3]
    background = np.median(pixels.reshape(-1, 3), axis=0)
    return float(np.mean(np.abs(pixels - background).sum(axis=-1) > 0.1))


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")


@needs_chromium
def test_the_harness_catches_what_it_looks_for(tmp_path):
    """The browser check can fail: a console error and a remote image are caught."""
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><html><head><link rel="icon" href="data:,"></head><body>'
                    '<img src="http://127.0.0.1:9/x.png"><script>console.error("boom")'
                    "</script></body></html>")
    events, png = load_in_chromium(page.as_uri(), height=400)
    problems = page_problems(events, page.as_uri())
    assert any("boom" in p for p in problems) and any("127.0.0.1" in p for p in problems)
    blank = tmp_path / "blank.html"
    blank.write_text('<!doctype html><html><head><link rel="icon" href="data:,"></head>'
                     "<body></body></html>")
    events, png = load_in_chromium(blank.as_uri(), height=400)
    assert page_problems(events, blank.as_uri()) == [] and _non_blank(png) < 0.001


@needs_chromium
def test_report_loads_in_chromium_without_errors(speculative_fit_path, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(speculative_fit_path), "-o", str(out)]) == 0
    events, png = load_in_chromium(out.as_uri())
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert page_problems(events, out.as_uri()) == []
    assert any(e.get("method") == "Page.loadEventFired" for e in events)
    assert _non_blank(png) > 0.02
