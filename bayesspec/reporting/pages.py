"""Pages people share: the decision report of one or more fits, as one self-contained
HTML page or as GitHub-flavoured Markdown, and the Markdown of a version comparison.

Nothing here computes science: the page is composed from the documents the rest of the
package produces (``decisions``: k*, crossover, speedup, SLO; ``reporting.summary``: the
fit summary; ``checks``: the predictive check; ``data.describe_exclusions``: the rows set
aside) and from its figures (``reporting.plots``), then rendered with the Jinja2 templates
in ``bayesspec/reporting/templates``. Kept whole: the page's sections are composed in one
place, in the order the page shows them. A page states, top to bottom: the decision (one
sentence per measured setup and objective, naming the measured configuration to run and
quoting that configuration's own crossover; where a mean fit and a tails fit answer the
same setup, a sentence saying which objective each answers),
the key numbers with intervals, the figures, what is extrapolated and why, the
convergence verdict and misfit flags, where the data came from, what to measure next
(when the planner :mod:`bayesspec.loadtest.planning` is installed), and the commands that
reproduce it.

The HTML page carries its figures inline (base64 PNG) and fetches nothing; the Markdown
writes its figures beside it (``NAME-figures/``).

Measure next: when the planner (:mod:`bayesspec.loadtest.planning`) is installed, the page lists
its top points (``question_from_fit`` then ``plan``) for the question the page answers:
``slo`` with targets, ``kstar`` for a speculative fit, ``crossover`` for a fitted
configuration, ``ceiling`` otherwise. Without it the section is left out.
"""

from __future__ import annotations

import base64
import importlib.util
import math
import shlex
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from bayesspec import _installed_version as _package_version
from bayesspec.errors import BadInput
from bayesspec.outputs import write_text_atomic
from bayesspec.uncertainty import DEFAULT_PROB

TEMPLATES = Path(__file__).with_name("templates")
#: Setups of one fit drawn as figures, and answered on the page at all (a hierarchical
#: fit may hold a hundred; the commands on the page answer the rest).
MAX_FIGURE_SETUPS = 3
MAX_SETUPS = 6
#: Questions of a page the planner answers for "Measure next" (the first unsettled shown).
MAX_PLANNED_QUESTIONS = 3
#: Rates at which decisions are read, from a twelfth of the highest fitted rate to it.
DECISION_RATES = 12
#: Alphas of a speculative setup whose k* is written out (the fitted ones, spread).
MAX_ALPHAS = 3
#: Rows set aside listed on the page (the rest counted).
MAX_SET_ASIDE = 30
MAX_TABLE_ROWS = 40


# --------------------------------------------------------------------------- numbers

def number(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def interval(u: dict | None, digits: int = 3) -> str:
    """'median [lo, hi]' of an uncertain number."""
    if not u or u.get("median") is None:
        return "n/a"
    return f"{number(u['median'], digits)} [{number(u['lo'], digits)}, {number(u['hi'], digits)}]"


def _table(title: str, columns: list[str], rows: list[list], note: str = "") -> dict:
    shown = rows[:MAX_TABLE_ROWS]
    if len(rows) > MAX_TABLE_ROWS:
        note = (note + " " if note else "") + f"({len(rows) - MAX_TABLE_ROWS} more rows not shown)"
    return {"title": title, "columns": columns,
            "rows": [[str(cell) for cell in row] for row in shown], "note": note}


# --------------------------------------------------------------------------- setups

def _selections(fit) -> list[dict]:
    """The group options naming each setup of a fit (verifier, lengths, and GPU and
    engine version when present): what ``fit.law`` takes."""
    groups = fit.groups
    columns = {"verifier": "verifier", "prefill": "prefill_tokens", "decode": "decode_tokens",
               "gpu": "gpu", "engine_version": "engine_version"}
    present = {option: column for option, column in columns.items() if column in groups.columns}
    seen, selections = set(), []
    for _, row in groups.iterrows():
        selection = {}
        for option, column in present.items():
            value = row[column]
            if value is None or pd.isna(value) or str(value) == "":
                continue
            selection[option] = (int(value) if option in ("prefill", "decode")
                                 else str(value))
        key = tuple(sorted(selection.items()))
        if key not in seen:
            seen.add(key)
            selections.append(selection)
    return selections


def _setup_mask(fit, selection: dict) -> np.ndarray:
    groups = fit.groups
    mask = np.ones(len(groups), dtype=bool)
    for option, column in (("verifier", "verifier"), ("prefill", "prefill_tokens"),
                           ("decode", "decode_tokens"), ("gpu", "gpu"),
                           ("engine_version", "engine_version")):
        if option in selection and column in groups.columns:
            mask &= groups[column].astype(str).to_numpy() == str(selection[option])
    return mask


def _fitted_alphas(fit, selection: dict) -> list[float]:
    groups = fit.groups
    mask = _setup_mask(fit, selection) & (groups["k"].to_numpy(int) > 0)
    alphas = sorted({round(float(a), 6) for a in groups.loc[mask, "alpha"]
                     if a is not None and not math.isnan(float(a))})
    if len(alphas) > MAX_ALPHAS:
        picks = np.unique(np.round(np.linspace(0, len(alphas) - 1, MAX_ALPHAS)).astype(int))
        alphas = [alphas[i] for i in picks]
    return alphas


def _fitted_ks(fit, selection: dict) -> list[int]:
    groups = fit.groups
    mask = _setup_mask(fit, selection)
    return sorted({int(k) for k in groups.loc[mask, "k"]})


def _option_text(selection: dict) -> str:
    return " ".join(f"--{option.replace('_', '-')} {shlex.quote(str(value))}"
                    for option, value in selection.items())


def _rates(law) -> np.ndarray:
    """Decision rates: a twelfth of the highest fitted rate of the setup up to it (the
    dense ceiling's median when the data do not say). Answers above what a
    configuration's own curves were fitted on are marked by the decision documents."""
    from bayesspec.inference.fitfile import fitted_top

    top = fitted_top(law)
    return np.round(np.linspace(top / DECISION_RATES, top, DECISION_RATES), 4)


def _segments(rows: list[dict], key) -> list[tuple]:
    """Consecutive rates with the same answer: [(answer, first rate, last rate, rows)]."""
    segments = []
    for row in rows:
        answer = key(row)
        if segments and segments[-1][0] == answer:
            segments[-1][2] = row["rps"]
            segments[-1][3].append(row)
        else:
            segments.append([answer, row["rps"], row["rps"], [row]])
    return [tuple(s) for s in segments]


def _k_name(k) -> str:
    return "dense (k = 0)" if k in (0, None) else f"k = {k}"


# --------------------------------------------------------------------------- one setup

#: The objective a mean-latency decision answers (an SLO decision names its targets).
MEAN_OBJECTIVE = "mean latency"


class _Section:
    """What one fit contributes to the page, filled setup by setup."""

    def __init__(self):
        self.decision: list[str] = []
        self.tables: list[dict] = []
        self.figures: list[dict] = []
        self.extrapolated: list[str] = []
        self.commands: list[str] = []
        self.notes: list[str] = []
        self.questions: list[tuple[str, dict]] = []
        #: What each decision recommends, for reconciling decisions on one setup made
        #: for different objectives (the mean of one fit, the SLO of another).
        self.choices: list[dict] = []

    def figure(self, name: str, caption: str, make) -> None:
        try:
            figure = make()
        except BadInput as error:
            self.notes.append(f"figure '{caption}' not drawn: {error}")
            return
        self.figures.extend({"name": f"{name}-{i}" if i else name, "caption": caption,
                             "figure": f}
                            for i, f in enumerate(figure if isinstance(figure, list) else [figure]))


def _setup_key(selection: dict) -> tuple:
    """What makes two fits' setups the same deployment: the verifier and the lengths."""
    return tuple((option, str(selection[option])) for option in ("verifier", "prefill", "decode")
                 if option in selection)


def _alpha_words(alpha) -> str:
    return ("" if alpha is None or (isinstance(alpha, float) and math.isnan(alpha))
            else f" at alpha {alpha:g}")


def _boundary_words(star: dict, k: int) -> str:
    """Why an RPS* is the law's extrapolation, in the vocabulary of every output."""
    notes = star["measured"]["design_notes"]
    if notes:
        return "; ".join(notes)
    beyond = star.get("p_beyond_measured")
    return (f"above {number(star['rps_fitted_max'])} RPS, the highest fitted rate of k = {k} "
            "and the dense baseline" + (f", P beyond it {beyond:.2f}" if beyond is not None
                                        else ""))


def _recommend(law, alpha: float, ks: list[int], rates: np.ndarray, prob: float,
               full: list[dict] | None = None) -> dict:
    """The measured configuration to run at one alpha: of the measured draft lengths
    ``ks`` (and dense), the k > 0 that k* picks at the most rates (the lowest such rate
    breaks ties), or k = 0 where none is ever best; its crossover; and where the law
    expects an unmeasured k to do better (``full``: the k* rows over every k at these
    rates)."""
    from bayesspec.decisions import crossover, kstar_table

    rows = kstar_table(law, [alpha], rates, ks=[0] + sorted(ks), prob=prob)["table"]
    counts: dict[int, int] = {}
    for row in rows:
        if row["k"] > 0:
            counts[row["k"]] = counts.get(row["k"], 0) + 1
    order = [row["k"] for row in rows]
    k = max(counts, key=lambda kk: (counts[kk], -order.index(kk))) if counts else 0
    chosen = [row for row in rows if row["k"] == k]
    star = crossover(law, alpha, k, prob=prob) if k > 0 else None
    unmeasured = None
    if full:
        better = [(r, f) for r, f in zip(rows, full) if f["k"] not in ks + [0]]
        if better:
            by_k: dict[int, list] = {}
            for _, row in better:
                by_k.setdefault(row["k"], []).append(row)
            u = max(by_k, key=lambda kk: len(by_k[kk]))
            unmeasured = {"k": u, "rates": [row["rps"] for row in by_k[u]],
                          "notes": by_k[u][0]["design_notes"]}
    return {"k": k, "rows": rows, "chosen": chosen, "star": star, "unmeasured": unmeasured,
            "p_best": min(row["p_best"] for row in chosen)}


def _recommendation_sentence(label: str, alpha, recommendation: dict, *,
                             objective: str = MEAN_OBJECTIVE) -> str:
    """One sentence: the measured configuration to run for ``objective``, how sure, its
    own crossover, and what the law suggests beyond the measured draft lengths."""
    rows, k = recommendation["rows"], recommendation["k"]
    top = number(rows[-1]["rps"])
    head = f"For {objective}, {label}{_alpha_words(alpha)}: "
    if k == 0:
        text = (head + "do not speculate: dense decoding beats every measured draft length "
                f"at every rate up to {top} RPS (P(best) >= {recommendation['p_best']:.2f})")
    else:
        chosen = recommendation["chosen"]
        others = [("dense" if kk == 0 else f"k = {kk}") + f" at {number(first)}"
                  + (f"-{number(last)}" if last != first else "") + " RPS"
                  for kk, first, last, _ in _segments(rows, lambda r: r["k"]) if kk != k]
        text = (head + f"run k = {k} (measured), the best measured draft length at "
                f"{len(chosen)} of {len(rows)} rates up to {top} RPS (P(best) >= "
                f"{recommendation['p_best']:.2f}" + "".join(f"; {o}" for o in others) + ")")
        beyond = [row for row in chosen if row["extrapolated"]]
        if beyond:
            text += (f", extrapolated from {number(beyond[0]['rps'])} RPS (above "
                     f"{number(beyond[0]['rps_fitted_max'])} RPS, the highest fitted rate of "
                     f"k = {k} and the dense baseline)")
        star = recommendation["star"]
        if star["rps_star"] is None or star["p_crossover"] < 0.5:
            text += (f"; SD with k = {k} has no crossover below saturation in "
                     f"{1 - star['p_crossover']:.0%} of draws")
        else:
            faster = (star["p_sd_faster_below"] or 0) >= 0.5
            text += (f"; SD with k = {k} " + ("stops paying above" if faster
                                              else "is slower below and faster above")
                     + f" RPS* {interval(star['rps_star'])}")
            if star["extrapolated"]:
                text += f" (extrapolated: {_boundary_words(star, k)})"
    unmeasured = recommendation["unmeasured"]
    if unmeasured:
        rates = unmeasured["rates"]
        span = (f"{number(rates[0])}-{number(rates[-1])} RPS" if len(rates) > 1
                else f"{number(rates[0])} RPS")
        text += (f"; the law expects k = {unmeasured['k']}, never measured, to do better at "
                 f"{span}: measure k = {unmeasured['k']} before relying on it")
    return text + "."


def _crossover_rows(section: _Section, law, alpha, ks: list[int], recommended: int,
                    prob: float) -> list[list]:
    """The crossover of every measured k at one alpha, the recommended one marked; each
    extrapolated RPS* said why on the page."""
    from bayesspec.decisions import crossover

    rows = []
    for k in ks:
        star = crossover(law, alpha, k, prob=prob)
        rows.append([_alpha_cell(alpha), k if k != recommended else f"{k} (recommended)",
                     interval(star["rps_star"]), f"{star['p_crossover']:.2f}",
                     "yes" if star["extrapolated"] else "no"])
        if star["extrapolated"]:
            section.extrapolated.append(
                f"{law.label}: RPS* of k = {k}{_alpha_words(alpha)} "
                f"({interval(star['rps_star'])}) is read off the fitted law, not seen in the "
                f"data: {_boundary_words(star, k)}; measure up to it before relying on it.")
    return rows


def _alpha_cell(alpha) -> str:
    return "measured" if alpha is None or math.isnan(alpha) else f"{alpha:g}"


def _coefficient_setup(section: _Section, fit, path: str, selection: dict, law,
                       prob: float, draw: bool) -> None:
    """A speculative setup with cycle coefficients: per measured alpha, the measured k to
    run and its crossover; k* over every k in the table."""
    from bayesspec.decisions import kstar_table

    from bayesspec.decisions.speculative import measured_acceptances

    rates = _rates(law)
    joint = getattr(law, "joint_acceptance", False)
    # the acceptances the data measured: stated alphas, or the counters' (the token
    # process's E(k), or each group's learned alpha), each answered by its own law
    measured = measured_acceptances(fit, law)
    answered = ([(m.law, m.alpha) for m in measured]
                or [(law, a) for a in (_fitted_alphas(fit, selection) or [0.8])])
    alphas = [alpha for _, alpha in answered]
    counted = all(math.isnan(alpha) for alpha in alphas)
    key_rows, cross_rows = [], []
    options = _option_text(selection)
    recommended = {}
    for n, (own, alpha) in enumerate(answered):
        rows = kstar_table(own, [alpha], rates, prob=prob)["table"]
        ks = [k for k in law.measured_ks
              if not own.measured(alpha, k)["design_extrapolated"]]
        choice = _recommend(own, alpha, ks, rates, prob, full=rows)
        recommended[n] = choice
        section.decision.append(_recommendation_sentence(own.label, alpha, choice))
        section.choices.append({"setup": _setup_key(selection), "label": own.label,
                                "alpha": None if math.isnan(alpha) else alpha,
                                "objective": MEAN_OBJECTIVE, "k": choice["k"],
                                "configuration": _k_name(choice["k"])})
        cross_rows += _crossover_rows(section, own, alpha, ks, choice["k"], prob)
        if choice["k"] > 0:
            section.commands.append(
                f"bayesspec crossover {shlex.quote(path)}"
                + ("" if math.isnan(alpha) else f" --alpha {alpha:g}")
                + f" --k {choice['k']} {options}".rstrip())
        for row in rows[::2]:
            key_rows.append([_alpha_cell(alpha), f"{number(row['rps'])}"
                             + ("*" if row["extrapolated"] else ""),
                             ">= %d" % row["k"] if row["at_max_k"] else row["k"],
                             f"{row['p_best']:.2f}", interval(row["speedup"]),
                             row["k_batch1"]])
    section.tables.append(_table(
        f"{law.label}: best draft length k* by acceptance and rate",
        ["alpha", "RPS", "k*", "P(best)", "speedup [interval]", "batch-1 k"], key_rows,
        "k = 0: do not speculate. P(best): share of posterior draws in which k* is best. "
        "*: extrapolated (above the highest fitted rate of k* and the dense baseline, or a "
        "k or alpha outside the measured ones), as `kstar` marks it."))
    if cross_rows:
        section.tables.append(_table(f"{law.label}: crossover RPS* of each measured k "
                                     "(SD stops paying above)",
                                     ["alpha", "k", "RPS* [interval]", "P(crossover)",
                                      "extrapolated"], cross_rows,
                                     "extrapolated: RPS* above the highest fitted rate of "
                                     "that k and the dense baseline, as `crossover` marks it."))
    measured_ks = _fitted_ks(fit, selection)
    section.extrapolated.append(
        f"{law.label}: k* searches k = 0..10 at any alpha through eq. (3); the data "
        f"measured k in {{{', '.join(map(str, measured_ks))}}} at alpha in "
        f"{{{', '.join(f'{a:g}' for a in _fitted_alphas(fit, selection)) or 'counters'}}}: "
        "other (alpha, k) are predicted by the six cycle coefficients, not measured.")
    section.commands.append(
        f"bayesspec kstar {shlex.quote(path)}"
        + ("" if counted else f" --alpha {','.join(f'{a:g}' for a in alphas)}")
        + f" --rps {','.join(number(r, 4) for r in rates)} {options}".rstrip())
    # An extrapolated RPS* of a recommended k is a decision the page says to measure up
    # to: the planner asks it first, so "Measure next" cannot call the page settled.
    section.questions += [("crossover", {"alpha": alphas[n], "k": choice["k"],
                                         "selection": selection})
                          for n, choice in recommended.items()
                          if not math.isnan(alphas[n]) and choice["star"] is not None
                          and choice["star"]["extrapolated"]]
    # a fit whose acceptance comes from its counters ignores alpha: any value asks it
    middle = alphas[len(alphas) // 2]
    section.questions.append(("kstar", {"alpha": 0.8 if math.isnan(middle) else middle,
                                        "rps": [float(rates[2]), float(rates[-3])],
                                        "selection": selection}))
    if not draw:
        return
    from bayesspec.reporting.plots import kstar_map_plot, speedup_bands_plot

    own, alpha = answered[len(answered) // 2]
    choice = recommended[len(answered) // 2]
    extra = {choice["unmeasured"]["k"]} if choice["unmeasured"] else set()
    ks = sorted(({1, 2, 4} | set(measured_ks) | {choice["k"]} | extra) - {0})
    section.figure("speedup", f"{own.label}: speedup over dense decoding"
                   f"{_alpha_words(alpha)} ({prob:.0%} bands; dashed: extrapolated)",
                   lambda: speedup_bands_plot(own, alpha, ks, rps_max=float(rates[-1]),
                                              prob=prob, recommended_k=choice["k"]))
    if joint or counted:
        return
    grid_alphas = np.round(np.arange(0.5, 0.951, 0.05), 2)
    grid_rates = np.round(np.linspace(rates[-1] / 24, rates[-1], 24), 4)
    section.figure("kstar", f"{law.label}: k* map over acceptance and rate (dotted cells: "
                   "extrapolated)",
                   lambda: kstar_map_plot(kstar_table(law, grid_alphas, grid_rates,
                                                      prob=prob)))


def _configuration_setup(section: _Section, fit, path: str, selection: dict, law,
                         prob: float, draw: bool) -> None:
    """SD known only at the fitted (alpha, k): per alpha, the fitted configuration to run
    against the dense baseline, and each one's speedup and crossover."""
    from bayesspec.decisions import crossover, speedup_curve

    rates = _rates(law)
    options = _option_text(selection)
    rows = []
    configurations = sorted(law.configurations,
                            key=lambda c: (c[1], -1.0 if c[0] is None else c[0]))
    by_alpha: dict = {}
    for alpha, k in configurations:
        by_alpha.setdefault(alpha, []).append(k)
    for alpha, ks in by_alpha.items():
        a = math.nan if alpha is None else alpha
        choice = _recommend(law, a, ks, rates, prob)
        section.decision.append(_recommendation_sentence(law.label, a, choice))
        section.choices.append({"setup": _setup_key(selection), "label": law.label,
                                "alpha": alpha, "objective": MEAN_OBJECTIVE,
                                "k": choice["k"], "configuration": _k_name(choice["k"])})
    for alpha, k in configurations:
        a = math.nan if alpha is None else alpha
        name = f"k = {k}" + ("" if alpha is None else f", alpha {alpha:g}")
        star = crossover(law, a, k, prob=prob)
        curve = speedup_curve(law, a, k, rates[[0, len(rates) // 2, -1]], prob=prob)
        if star["rps_star"] is not None and star["extrapolated"]:
            section.extrapolated.append(
                f"{law.label}: RPS* of {name} ({interval(star['rps_star'])}) is read off the "
                f"fitted law, not seen in the data: {_boundary_words(star, k)}.")
            if alpha is not None:           # the planner asks it first ("Measure next")
                section.questions.append(("crossover", {"alpha": alpha, "k": k,
                                                        "selection": selection}))
        star_cell = (interval(star["rps_star"]) + ("*" if star["extrapolated"] else "")
                     if star["rps_star"] else "none")
        for point in curve["points"]:
            rows.append([name, number(point["rps"]) + ("*" if point["extrapolated"] else ""),
                         interval(point["speedup"]), f"{point['p_slower']:.2f}", star_cell])
        section.commands.append(f"bayesspec speedup {shlex.quote(path)} --alpha "
                                f"{a if alpha is not None else 0.8:g} --k {k} --rps "
                                f"{','.join(number(r, 4) for r in rates[[0, 5, 11]])} "
                                f"{options}".strip())
    if rows:
        section.tables.append(_table(f"{law.label}: speedup of each fitted configuration",
                                     ["configuration", "RPS", "speedup [interval]",
                                      "P(SD slower)", "RPS*"], rows,
                                     "*: extrapolated (above the highest fitted rate of the "
                                     "configuration and the dense baseline), as `speedup` "
                                     "and `crossover` mark it."))
        alpha, k = configurations[0]
        if alpha is not None:
            section.questions.append(("crossover", {"alpha": alpha, "k": k,
                                                    "selection": selection}))
    if draw and configurations:
        from bayesspec.reporting.plots import speedup_bands_plot

        alpha = max(by_alpha, key=lambda a: len(by_alpha[a]))
        a = math.nan if alpha is None else alpha
        section.figure("speedup", f"{law.label}: speedup of the fitted configurations"
                       + ("" if alpha is None else f" at alpha {alpha:g}")
                       + " (dashed: extrapolated)",
                       lambda: speedup_bands_plot(law, a, by_alpha[alpha],
                                                  rps_max=float(rates[-1]), prob=prob))


def _slo_setup(section: _Section, fit, path: str, selection: dict, law, targets: dict,
               slo_prob: float, prob: float, draw: bool) -> None:
    from bayesspec.decisions import slo_decision
    from bayesspec.data.schema import metric_description

    known = fit.model().metrics(fit)
    missing = [m for m in targets if m not in known]
    if missing:
        raise BadInput(f"this fit has no law for {', '.join(missing)}; it answers "
                       f"{', '.join(known) or 'the mean only (fit --model tails)'}",
                       argument="targets")
    laws = {metric: fit.law(selection, metric=metric) for metric in targets}
    rates = _rates(law)
    document = slo_decision(laws, law, targets, rates, slo_prob=slo_prob, prob=prob)
    slo = ", ".join(f"{metric_description(m)} <= {t:g} s" for m, t in targets.items())
    objective = f"the SLO on percentiles ({slo}, met with P >= {slo_prob:g})"
    goodput = "; ".join(f"{e['configuration']} {interval(e['goodput_rps'])} RPS"
                        + (" (extrapolated)" if e["extrapolated"] else "")
                        for e in document["configurations"])
    words = []
    for configuration, first, last, members in _segments(document["best_by_rps"],
                                                         lambda r: r["configuration"]):
        what = configuration or "no configuration meets it"
        span = (f"from {number(first)} to {number(last)} RPS" if first != last
                else f"at {number(first)} RPS")
        beyond = [r for r in members if r["extrapolated"]]
        if beyond:
            span += f" (extrapolated from {number(beyond[0]['rps'])} RPS)"
        words.append(f"{what} {span}")
    # what the SLO recommends, rate by rate, for reconciling it with a mean decision
    section.choices.append({
        "setup": _setup_key(selection), "label": law.label, "alpha": None,
        "objective": objective,
        "alphas": sorted({e["alpha"] for e in document["configurations"]
                          if e["alpha"] is not None}),
        "segments": [(None if not members[0]["configuration"] else members[0]["k"],
                      first, last)
                     for _, first, last, members in _segments(
                         document["best_by_rps"], lambda r: r["configuration"])]})
    section.decision.append(
        f"For {objective}, {law.label}: best configuration " + ", then ".join(words)
        + f"; goodput {goodput}.")
    rows = []
    for entry in document["configurations"]:
        binding = max(entry["binding"], key=entry["binding"].get)
        rows.append([entry["configuration"], interval(entry["goodput_rps"]),
                     number(entry["rps_meeting_slo"]) + ("*" if entry["extrapolated"] else ""),
                     f"{binding} ({entry['binding'][binding]:.0%})"])
        if entry["extrapolated"]:
            section.extrapolated.append(
                f"{law.label}: {entry['configuration']} meets the SLO up to "
                f"{number(entry['rps_meeting_slo'])} RPS, above "
                f"{number(entry['rps_fitted_max'])} RPS, its highest fitted rate: the law's "
                "extrapolation, whose interval is too narrow there.")
    section.tables.append(_table(f"{law.label}: goodput under the SLO ({slo})",
                                 ["configuration", "goodput RPS [interval]",
                                  f"RPS at P >= {slo_prob:g}", "binding target"], rows,
                                 "*: above that configuration's highest fitted rate "
                                 "(extrapolated), as `slo` marks it."))
    flags = " ".join(f"--target {m}={t:g}" for m, t in targets.items())
    section.commands.append(f"bayesspec slo {shlex.quote(path)} {flags} --slo-prob "
                            f"{slo_prob:g} {_option_text(selection)}".strip())
    section.questions.insert(0, ("slo", {"targets": dict(targets), "selection": selection}))
    if draw:
        from bayesspec.reporting.plots import slo_plot

        section.figure("slo", f"{law.label}: latency summaries against the SLO targets "
                       "(hollow triangles: extrapolated)",
                       lambda: slo_plot(laws, document, fit=fit, prob=prob))


def _reconciled(sections: list[dict]) -> list[str]:
    """One sentence per setup and alpha that decisions for different objectives answer:
    mean latency (a mean fit, or a tails fit's mean law) and an SLO on percentiles (a
    tails fit) can recommend different configurations, and the page says which objective
    each answers and when to follow which."""
    choices = [dict(choice, fit=section["name"]) for section in sections
               for choice in section["choices"]]
    several = len(sections) > 1
    means = [c for c in choices if c["objective"] == MEAN_OBJECTIVE]
    slos = [c for c in choices if c["objective"] != MEAN_OBJECTIVE]
    lines = []
    for where in dict.fromkeys((c["setup"], c["alpha"]) for c in means):
        group = [c for c in means if (c["setup"], c["alpha"]) == where]
        alpha = where[1]
        for slo in slos:
            if slo["setup"] != where[0] or (alpha is not None and slo["alphas"] and not any(
                    abs(alpha - a) < 1e-9 for a in slo["alphas"])):
                continue
            mean_ks = {c["k"] for c in group}
            mean_text = ("; ".join(f"{_k_name(c['k'])} ({c['fit']})" for c in group)
                         if len(mean_ks) > 1 else _k_name(group[0]["k"])
                         + (f" ({' and '.join(dict.fromkeys(c['fit'] for c in group))})"
                            if several else ""))
            slo_text = ", ".join(
                ("nothing meets it" if k is None else _k_name(k))
                + (f" from {number(first)} to {number(last)} RPS" if first != last
                   else f" at {number(first)} RPS")
                for k, first, last in slo["segments"])
            slo_ks = {k for k, _, _ in slo["segments"] if k is not None}
            head = (f"{group[0]['label']}{_alpha_words(alpha)}: for mean latency, "
                    f"{mean_text}; for {slo['objective']}"
                    + (f" ({slo['fit']})" if several else "") + f", {slo_text}")
            if slo_ks == mean_ks and len(mean_ks) == 1:
                lines.append(head + ": both objectives recommend the same configuration.")
            else:
                lines.append(head + ": they answer different objectives; follow the SLO's "
                             "where the service is held to its percentiles, the mean's where "
                             "mean latency is what counts.")
    return list(dict.fromkeys(lines))


def _dense_groups(section: _Section, fit, prob: float) -> None:
    """A fit without SD: each group's batch-1 latency and where it saturates."""
    from bayesspec.reporting.summary import summary_document

    document = summary_document(fit, prob=prob)
    parts = []
    for entry in document["groups"][:6]:
        parts.append(f"{entry['label']}: {interval(entry['C1'])} s at batch 1, saturating "
                     f"at {interval(entry['saturation_rps'])} RPS (fitted up to "
                     f"{number(entry.get('rps_fitted_max'))}, measured up to "
                     f"{number(entry['rps_measured_max'])})")
    more = len(document["groups"]) - 6
    section.decision.append("Mean latency follows L = C1/(1 - RPS*C2): " + "; ".join(parts)
                            + (f"; and {more} more groups" if more > 0 else "") + ".")


# --------------------------------------------------------------------------- one fit

def _groups_table(fit, prob: float) -> tuple[dict, list[str]]:
    from bayesspec.reporting.summary import summary_document

    document = summary_document(fit, prob=prob)
    rows, beyond = [], []
    for entry in document["groups"]:
        fitted = entry.get("rps_fitted_max")
        saturation = entry["saturation_rps"]
        rows.append([entry["label"], interval(entry["C1"]), interval(entry["C2"]),
                     interval(saturation), number(fitted),
                     number(entry.get("rps_measured_max"))])
        if (saturation.get("median") is not None and fitted is not None
                and np.isfinite(fitted) and saturation["median"] > fitted):
            beyond.append(entry["label"])
    table = _table("Fitted costs per group", ["group", "C1 (s)", "C2 (s/request)",
                                              "ceiling RPS", "highest fitted RPS",
                                              "highest measured RPS"],
                   rows, "C1: latency on an idle server (batch 1); C2: what each concurrent "
                         "request adds; ceiling: the rate at which latency diverges (1/C2, "
                         "or the engine cap's throughput when the cap is known); fitted: "
                         "the highest rate in the likelihood; measured: the highest the data "
                         "reached, set-aside points included.")
    notes = []
    if beyond:
        notes.append(f"The ceiling lies above the highest fitted rate in {len(beyond)} of "
                     f"{len(rows)} groups ({', '.join(beyond[:3])}"
                     f"{' ...' if len(beyond) > 3 else ''}): where latency diverges is read "
                     "off the law, not seen; a throughput run shows the real ceiling.")
    return table, notes


def _closed_loop_table(section: _Section, fit, path: str, prob: float) -> None:
    """The groups measured in a closed loop, answered on their axis: latency and
    throughput at each measured concurrency level (``predict --concurrency``)."""
    from bayesspec.decisions.concurrency import predict_concurrency
    from bayesspec.reporting.plots.concurrency import closed_loop_groups

    groups = closed_loop_groups(fit) if fit.model().has_mean(fit) else []
    rows = []
    for g in groups[:MAX_SETUPS]:
        label = fit.groups["label"].iloc[g]
        levels = sorted({int(v) for v in fit.data.loc[fit.data["group"] == label,
                                                      "max_concurrency"].astype(float)})
        for point in predict_concurrency(fit, g, levels, prob=prob)["points"]:
            mark = "*" if point["extrapolated"] else ""
            rows.append([label, f"{point['concurrency']}{mark}",
                         interval(point["latency_s"]), interval(point["rps"]),
                         number(point["p_past_cap"])])
    if not rows:
        return
    section.tables.append(_table(
        "Closed-loop groups on their axis: latency and throughput per concurrency level",
        ["group", "concurrency N", "mean latency s", "throughput RPS", "P(past the cap)"],
        rows, f"At N clients L = C1 + C2 N, throughput N / L ({prob:.0%} intervals); *: "
              "above the group's highest fitted concurrency (set aside or not measured), "
              "read off the law."))
    if len(fit.groups) == 1:
        section.commands.append(f"bayesspec predict {shlex.quote(path)} --concurrency "
                                + ",".join(row[1].rstrip("*") for row in rows))


def _misfit(section: _Section, fit, path: str, prob: float, draw: bool) -> dict:
    from bayesspec import checks

    try:
        check = checks.predictive_check(fit, prob=prob)
    except (BadInput, ValueError) as error:
        # e.g. PSIS on a posterior too degenerate to smooth (an unmixed fit): the page
        # still says everything else, and says the check could not be made
        return {"verdict": f"the predictive check could not be made on this fit ({error})",
                "flagged": [], "inside": ""}
    points = check.pop("_points")
    check.pop("_summary_points", None)
    section.commands.append(f"bayesspec check {shlex.quote(path)} --ppc")
    has_mean = fit.model().has_mean(fit)
    if draw:
        from bayesspec.reporting.plots import collapse_plot, predictive_check_plot
        from bayesspec.data.schema import metric_description

        # a fit of percentiles alone is checked on its first summary
        quantity = ("mean latency" if has_mean
                    else metric_description(next(iter(check["summaries"]))))
        section.figure("collapse", "every group normalised onto y = 1/(1 - x) (the law's "
                       "collapse), with the fitted noise band", lambda: collapse_plot(fit))
        from bayesspec.reporting.plots import closed_loop_groups, concurrency_plot

        if has_mean and closed_loop_groups(fit):
            section.figure("concurrency", "closed-loop sweeps on the axis they were measured "
                           "on: mean latency and throughput against the clients' concurrency "
                           f"N, with the law's {prob:.0%} band (L = C1 + C2 N)",
                           lambda: concurrency_plot(fit, prob=prob))
        section.figure("ppc", "posterior predictive check per group: observed / predicted "
                       f"against utilisation ({prob:.0%} predictive intervals)",
                       lambda: predictive_check_plot(points, check["groups"], prob=prob,
                                                     quantity=quantity)[0])
    inside = check["inside"]
    if check.get("summaries") and has_mean:
        inside = "; ".join([f"mean: {inside}"] + [
            checks.summary_line(metric, entry["pooled"])
            for metric, entry in check["summaries"].items()])
    return {"verdict": check["verdict"], "flagged": check["flagged"], "inside": inside}


def _provenance(fit, path: str) -> dict:
    import json

    from bayesspec.data import describe_exclusions

    attrs = fit.tree.attrs
    data = fit.data
    lines = describe_exclusions(data)
    settings = json.loads(attrs.get("sampler_settings", "{}") or "{}")
    shown = {k: settings[k] for k in ("sampler", "method", "chains", "draws", "tune", "seed",
                                      "target_accept") if settings.get(k) is not None}
    facts = [("fit file", path),
             ("model", f"{fit.model_name} (version {attrs.get('bayesspec_model_version')}, "
                       f"id {attrs.get('model_id')})"),
             ("data file", str(attrs.get("source_file") or "not recorded")),
             ("rows", f"{len(data)} ({len(data) - len(lines)} in the likelihood, "
                      f"{len(lines)} set aside)"),
             ("groups", str(len(fit.groups))),
             ("sampler", ", ".join(f"{k} {v}" for k, v in shown.items()) or "not recorded"),
             ("fitted", f"{attrs.get('created', 'unknown')} by bayesspec "
                        f"{attrs.get('bayesspec_version', '?')}")]
    if "source" in data.columns:
        sources = sorted({str(s) for s in data["source"].dropna() if str(s)})
        if sources:
            facts.append(("sources", ", ".join(sources[:5])
                          + (f" and {len(sources) - 5} more" if len(sources) > 5 else "")))
    return {"facts": facts, "set_aside": lines[:MAX_SET_ASIDE],
            "set_aside_more": max(0, len(lines) - MAX_SET_ASIDE)}


def _refit_command(fit, path: str) -> str | None:
    import json

    attrs = fit.tree.attrs
    source = str(attrs.get("source_file") or "")
    if not source or source.startswith("<"):
        return None
    settings = json.loads(attrs.get("sampler_settings", "{}") or "{}")
    words = ["bayesspec", "fit", shlex.quote(source), "--model", fit.model_name, "-o",
             shlex.quote(path)]
    for key, flag in (("seed", "--seed"), ("draws", "--draws"), ("tune", "--tune"),
                      ("chains", "--chains")):
        if settings.get(key) is not None:
            words += [flag, str(settings[key])]
    model = fit.model()
    target = settings.get("target_accept")
    if target is not None and abs(float(target) - float(model.target_accept)) > 1e-9:
        words += ["--target-accept", f"{float(target):g}"]
    from bayesspec.bayes.options import command_line, resolved_options

    words += command_line(fit.model_name, fit.model_config, resolved_options(fit))
    return " ".join(words)


def _measure_next(fit, questions: list[tuple[str, dict]]) -> dict | None:
    """The planner's top points (:mod:`bayesspec.loadtest.planning`) for the first of the
    page's questions (up to :data:`MAX_PLANNED_QUESTIONS`) that is not settled: "Settled"
    only when every one is, as `plan` would say of each; None when the planner is not
    installed."""
    if importlib.util.find_spec("bayesspec.loadtest.planning") is None:
        return None
    from bayesspec.loadtest import planning

    planned, errors = [], []
    asked_once = list({repr(q): q for q in questions}.values()) if questions else []
    for question, options in (asked_once or [("ceiling", {})])[:MAX_PLANNED_QUESTIONS]:
        options = dict(options)
        selection = options.pop("selection", None) or {}
        try:
            asked = planning.question_from_fit(fit, question, selection=selection, **options)
            planned.append((question, options, selection, planning.plan(asked, top=5)))
        except (BadInput, ValueError) as error:
            errors.append({"question": question, "error": str(error), "next": [],
                           "commands": []})
    unsettled = [item for item in planned if not item[3]["settled"]]
    if not unsettled and errors:
        return errors[0]            # settled only where the planner could answer
    question, options, selection, result = (unsettled or planned)[0]
    entries = [candidate.document() for candidate in result["next"]]
    data = fit.data
    prefill, decode = planning.planned_lengths(data, selection.get("prefill"),
                                               selection.get("decode"))
    verifier = selection.get("verifier") or (str(data["verifier"].iloc[0])
                                             if "verifier" in data.columns else "model")
    commands = []
    for entry in entries[:1]:
        # the point's own configuration (verifier, lengths, k), as `plan` prints it
        lines = planning.command_lines({"verifier": verifier, **entry},
                                       target="http://localhost:8000", prefill=prefill,
                                       decode=decode, version=planning.guidellm_version())
        commands += [lines["guidellm"], lines["vllm"], lines["ingest"]]
    words = [f"bayesspec plan {{path}} --question {question}"]
    for key in ("alpha", "k"):
        if options.get(key) is not None:
            words.append(f"--{key} {options[key]:g}")
    if options.get("rps") is not None:
        words.append("--rps " + ",".join(number(r, 4) for r in options["rps"]))
    for metric, target in (options.get("targets") or {}).items():
        words.append(f"--target {metric}={target:g}")
    return {"question": question, "settled": result["settled"],
            "unsettled": result["unsettled"],
            "expected_loss": result["expected_loss"], "next": entries,
            "commands": commands, "command": " ".join(words)}


def fit_section(fit, path: str, *, prob: float = DEFAULT_PROB, slo_targets: dict | None = None,
                slo_prob: float = 0.9) -> dict:
    """Everything the page says about one fit (figures as matplotlib Figures)."""
    section = _Section()
    verdict = fit.diagnostics
    selections = _selections(fit)
    has_metrics = bool(fit.model().metrics(fit))
    has_sd = bool((fit.groups["k"].to_numpy(int) > 0).any())
    if not has_sd and not (slo_targets and has_metrics):
        selections = []         # nothing to decide between: the costs say it all
    if len(selections) > MAX_SETUPS:
        section.notes.append(f"the fit holds {len(selections)} setups; this page answers the "
                             f"first {MAX_SETUPS} (the same commands with other group "
                             "options answer the rest)")
    for number_, selection in enumerate(selections[:MAX_SETUPS]):
        draw = number_ < MAX_FIGURE_SETUPS
        try:
            law = fit.law(selection)
        except BadInput as error:
            section.notes.append(f"{selection}: {error}")
            continue
        if not law.has_dense:
            section.notes.append(f"{law.label}: no dense baseline (k = 0 rows), so no "
                                 "speedup or k* for it")
        elif law.answers_any_configuration:
            _coefficient_setup(section, fit, path, selection, law, prob, draw)
        elif getattr(law, "configurations", None):
            _configuration_setup(section, fit, path, selection, law, prob, draw)
        if slo_targets and has_metrics and law.has_dense:
            _slo_setup(section, fit, path, selection, law, slo_targets, slo_prob, prob, draw)
    if not section.decision:
        _dense_groups(section, fit, prob)
    if has_metrics and not slo_targets:
        section.notes.append("this tails fit answers SLO questions: give targets (e.g. "
                             "--ttft-p99 0.5 --itl-p99 0.05) for goodput and the SLO bands")
    groups_table, saturation_notes = _groups_table(fit, prob)
    section.tables.insert(0, groups_table)
    _closed_loop_table(section, fit, path, prob)
    section.extrapolated.extend(saturation_notes)
    misfit_part = _misfit(section, fit, path, prob, draw=True)
    refit = _refit_command(fit, path)
    commands = ([refit] if refit else []) + [f"bayesspec summary {shlex.quote(path)}"]
    commands += list(dict.fromkeys(section.commands))
    measure_next = _measure_next(fit, section.questions)
    if measure_next and measure_next.get("command"):
        commands.append(measure_next["command"].replace("{path}", shlex.quote(path)))
    return {
        "path": path, "name": Path(path).name, "model": fit.model_name,
        "groups": len(fit.groups), "rows": len(fit.data),
        "converged": bool(verdict["converged"]), "status": verdict["status"],
        "verdict": verdict["text"], "advice": verdict.get("advice", ""),
        "diagnostics": {"R-hat max": number(verdict["rhat_max"], 4),
                        "bulk ESS min": number(verdict["ess_bulk_min"], 4),
                        "divergences": str(verdict["divergences"])},
        "decision": section.decision, "choices": section.choices, "tables": section.tables,
        "figures": section.figures, "extrapolated": section.extrapolated,
        "misfit": misfit_part, "provenance": _provenance(fit, path),
        "measure_next": measure_next,
        "notes": section.notes, "commands": commands,
    }


def report_document(fits: list, paths: list[str], *, prob: float = DEFAULT_PROB,
                    slo_targets: dict | None = None, slo_prob: float = 0.9,
                    command: str = "") -> dict:
    """The page: one section per fit, the decision and NOT CONVERGED on top."""
    sections = [fit_section(fit, path, prob=prob, slo_targets=slo_targets, slo_prob=slo_prob)
                for fit, path in zip(fits, paths)]
    unconverged = [s for s in sections if not s["converged"]]
    return {
        "title": "bayesspec decision report: " + ", ".join(s["name"] for s in sections),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": _package_version(), "prob": prob,
        "not_converged": [{"name": s["name"], "verdict": s["verdict"], "advice": s["advice"]}
                          for s in unconverged],
        "sections": sections,
        "reconciled": _reconciled(sections),
        "command": command,
    }


# --------------------------------------------------------------------------- rendering

def _environment():
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",),
                                            default_for_string=False),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined)
    environment.filters["md"] = _markdown_cell
    environment.globals.update(interval=interval, number=number)
    return environment


def _markdown_cell(value) -> str:
    """A value safe inside a Markdown table cell or line."""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _png_data(figure) -> str:
    from bayesspec.reporting.plots import figure_png

    return "data:image/png;base64," + base64.b64encode(figure_png(figure)).decode("ascii")


def render_html(document: dict) -> str:
    """The page as one self-contained HTML document (figures inline)."""
    for section in document["sections"]:
        for figure in section["figures"]:
            figure["src"] = _png_data(figure.pop("figure"))
    return _environment().get_template("report.html.j2").render(**document)


def render_markdown(document: dict, path: Path) -> tuple[str, list[str]]:
    """The page as GitHub-flavoured Markdown; figures saved beside it
    (``STEM-figures/NAME.png``), linked relatively."""
    from bayesspec.reporting.plots import save_figure

    folder = path.parent / f"{path.stem}-figures"
    written = []
    for i, section in enumerate(document["sections"]):
        for figure in section["figures"]:
            folder.mkdir(exist_ok=True)
            target = folder / f"{i + 1}-{figure['name']}.png"
            written.append(save_figure(figure.pop("figure"), target))
            figure["src"] = f"{folder.name}/{target.name}"
    return _environment().get_template("report.md.j2").render(**document), written


def write_report(fits: list, paths: list[str], output: str, *, prob: float = DEFAULT_PROB,
                 slo_targets: dict | None = None, slo_prob: float = 0.9,
                 command: str = "") -> dict:
    """Write the report of ``fits`` (their files ``paths``) to ``output`` (.html or .md)."""
    target = Path(output)
    suffix = target.suffix.lower()
    if suffix not in (".html", ".htm", ".md", ".markdown"):
        raise BadInput("the report is HTML (.html) or Markdown (.md)", file=output)
    document = report_document(fits, paths, prob=prob, slo_targets=slo_targets,
                               slo_prob=slo_prob, command=command)
    if suffix in (".html", ".htm"):
        text, figures = render_html(document), []
    else:
        text, figures = render_markdown(document, target)
    write_text_atomic(target, text)
    return {"output": str(target), "figures": figures,
            "not_converged": [entry["name"] for entry in document["not_converged"]],
            "decision": ([line for s in document["sections"] for line in s["decision"]]
                         + document["reconciled"])}


def compare_markdown(document: dict, *, command: str = "") -> str:
    """A ``compare`` document as a pull-request comment."""
    return _environment().get_template("compare.md.j2").render(
        document=document, command=command, version=_package_version())


def write_compare_markdown(document: dict, output: str, *, command: str = "") -> str:
    return write_text_atomic(output, compare_markdown(document, command=command))
