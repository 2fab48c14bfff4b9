"""The README as a user meets it: the walkthrough runs as pasted, every `bayesspec` command
it (or a docs page) shows parses, and it stays a short guide whose figures link their page.
Its links are checked in tests/test_docs_links.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bayesspec.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[str]:
    """One string per command: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


WALKTHROUGH = [c for block in shell_blocks(section(README, "Using it")) for c in commands(block)]


def test_walkthrough_is_there():
    verbs = {shlex.split(c)[1] for c in WALKTHROUGH}
    assert {"simulate", "fit", "summary", "speedup", "crossover", "kstar", "predict",
            "compare-models", "check", "ingest", "acceptance", "slo", "report"} <= verbs


@pytest.fixture(scope="module")
def walkthrough_run(tmp_path_factory):
    """Every walkthrough command, in order, in a fresh folder that sees the repository's
    examples/ and tests/ (the files the commands name), with this Python's bin on PATH."""
    folder = tmp_path_factory.mktemp("walkthrough")
    for name in ("examples", "tests"):
        (folder / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                f"{os.environ.get('PATH', '')}")
    results = []
    for command in WALKTHROUGH:
        done = subprocess.run(command, shell=True, cwd=folder, env=env, capture_output=True,
                              text=True, timeout=1500)
        results.append((command, done))
        if done.returncode != 0:
            break
    return folder, results


@pytest.mark.walkthrough
def test_walkthrough_runs_as_pasted(walkthrough_run):
    folder, results = walkthrough_run
    for command, done in results:
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    assert len(results) == len(WALKTHROUGH)
    for name in ("sweeps.csv", "fit.nc", "dense.nc", "ingested.csv", "ingested.nc",
                 "speedup.png", "kstar.png", "tails.nc", "slo.png", "report.html"):
        assert (folder / name).stat().st_size > 0, name


@pytest.mark.walkthrough
def test_walkthrough_fits_converge_and_answer(walkthrough_run):
    _, results = walkthrough_run
    said = {command: done.stdout for command, done in results}
    fits = {command: out for command, out in said.items() if " fit " in f" {command} "}
    assert fits
    for command, out in fits.items():
        # name the fit and its verdict: the output's middle is what a failure needs
        verdict = [line for line in out.splitlines() if line.startswith("diagnostics:")]
        assert "-> OK" in out, f"{command}: {verdict or out[-600:]}"
    crossover = next(out for command, out in said.items() if "crossover" in command)
    assert re.search(r"RPS\* = [\d.]+ \[[\d.]+, [\d.]+\]", crossover)
    schedule = next(out for command, out in said.items() if "--vllm" in command)
    assert "num_speculative_tokens_per_batch_size" in schedule
    slo = next(out for command, out in said.items() if command.startswith("bayesspec slo"))
    assert re.search(r"dense \(k = 0\) +[\d.]+ \[[\d.]+, [\d.]+\]", slo), slo


DOCS = sorted((ROOT / "docs").glob("*.md"))


def shown_commands(text: str) -> list[str]:
    """Every `bayesspec ...` command a page shows: its sh blocks and inline code."""
    shown = [c for block in shell_blocks(text) for c in commands(block)]
    return shown + re.findall(r"`(bayesspec [^`]+)`", text)


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_command_shown_parses(page):
    """Commands outside the walkthrough (sbc, serve, compare, the docs pages' examples ...)
    at least name verbs and options that exist."""
    parser = build_parser()
    placeholders = {"N": "2", "W": "2", "V": "Qwen3-8B", "DATA": "x.csv", "DIR": "out",
                    "tcp://...": "tcp://127.0.0.1:8786"}
    checked = 0
    for command in shown_commands(page.read_text(encoding="utf-8")):
        words = shlex.split(command.replace("[", "").replace("]", ""))
        if words[0] != "bayesspec" or len(words) < 2 or not words[1].islower():
            continue        # `bayesspec VERB ...` names the form, not a command
        words = [placeholders.get(w, w) for w in words[1:]]
        try:
            parser.parse_args(words)
        except SystemExit as stop:
            assert stop.code == 0, f"{page.name}: {command}"
        checked += 1
    if page.name == "README.md":
        assert checked >= len(WALKTHROUGH)


def test_readme_is_a_guide():
    """The README stays short: the depth lives in docs/."""
    assert len(README.splitlines()) <= 250


def test_no_figure_in_the_readme_without_its_page():
    """A README paragraph that states a measured share (a percentage, 'n of m') links the
    page that measures it."""
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    for paragraph in re.split(r"\n\s*\n", prose):
        # "a 90% interval" is a level, not a measurement
        if re.search(r"\d(\.\d+)?%(?! (credible |predictive )?interval)|\b\d+ of \d+\b",
                     paragraph):
            assert re.search(r"\]\((docs/|benchmarks/)", paragraph), paragraph


def test_the_python_laws_lines_run_as_pasted():
    """The README's Python section: its `laws` lines (the block's first paragraph) name
    only what they define (they once raised NameError on `rps`)."""
    block = re.findall(r"```python\n(.*?)```", section(README, "Python"), flags=re.S)[0]
    laws_lines = block.split("\n\n", 1)[0]
    assert "from bayesspec import laws" in laws_lines
    namespace: dict = {}
    exec(compile(laws_lines, "README.md", "exec"), namespace)   # noqa: S102
    laws = namespace["laws"]
    assert laws.crossover_rps(3.7, 0.040, 2.4, 0.045) > 0


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.walkthrough
def test_python_section_runs_as_written(walkthrough_run):
    """The README's Python snippet, pasted into a fresh interpreter in the folder the
    walkthrough left behind (its fit.nc), runs without an error."""
    folder, results = walkthrough_run
    assert all(done.returncode == 0 for _, done in results)
    blocks = python_blocks(section(README, "Python"))
    assert blocks
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=folder,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "speedup_notebook.png").stat().st_size > 10_000
