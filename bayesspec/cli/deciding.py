"""``bayesspec predict``, ``speedup``, ``crossover``, ``kstar`` and ``slo``: answers from a
fit.

Kept whole: the five verbs share how a question is resolved to the configuration the data
measured (acceptance and k, or a what-if) and how every answer marks what it
extrapolates, and split apart they would each carry a copy of that resolution."""

from __future__ import annotations

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.data.schema import metric_description
from bayesspec.cli import concurrency
from bayesspec.cli.common import (add_common, add_group_options, check_alpha_k, check_output_path,
                     check_prob, finish, fmt, group_criteria, load_fit, parse_list, rates,
                     strict_exit)

STRICT_HELP = "exit with status 3 when the posterior did not converge"
ALPHA_HELP = ("acceptance rate to answer at, a what-if (default: the acceptance the data "
              "measured, from the alpha column or the counters, each measured one in turn; "
              "an alpha outside the measured range is marked extrapolated)")
K_HELP = ("draft length (default: the measured k, each in turn where several were "
          "measured)")
EXTRAPOLATED = "*"   # Law.extrapolated: past the fitted rates or the measured design


def register(verbs) -> None:
    predict = verbs.add_parser("predict", help="mean latency (or, with --metric, a latency "
                                              "summary) with intervals at given rates")
    predict.add_argument("fit", help="fit file")
    concurrency.add_load_axis(predict)
    add_metric_option(predict, compared=False)
    predict.add_argument("--requests", type=float, metavar="N",
                         help="the new measurement is a load test of N requests per rate: "
                              "a summary's sampling error (a p99 of few requests reads low "
                              "and scatters) and, where the group's points are whole runs "
                              "from an idle server (column whole_run), the run's fill, drain "
                              "and finite queue past the ceiling (default: the median "
                              "request count of the group's fitted points, when the data "
                              "give one)")
    add_group_options(predict)
    predict.add_argument("--strict", action="store_true", help=STRICT_HELP)
    add_common(predict)
    predict.set_defaults(handler=concurrency.on_load_axis(run_predict, concurrency.predict))

    speedup = verbs.add_parser("speedup", help="speedup curve of SD vs dense with intervals")
    speedup.add_argument("fit", help="fit file")
    speedup.add_argument("--alpha", type=float, default=None,
                         help=ALPHA_HELP)
    speedup.add_argument("--k", type=int, default=None, help=K_HELP)
    speedup.add_argument("--rps", required=True, help="LIST: 1,2,5 or start:stop:step")
    speedup.add_argument("--plot", help="write speedup bands for several k to this PNG")
    add_metric_option(speedup)
    add_group_options(speedup, design=False)
    speedup.add_argument("--strict", action="store_true", help=STRICT_HELP)
    add_common(speedup)
    speedup.set_defaults(handler=run_speedup)

    cross = verbs.add_parser("crossover", help="RPS* above which SD stops paying")
    cross.add_argument("fit", help="fit file")
    cross.add_argument("--alpha", type=float, default=None, help=ALPHA_HELP)
    cross.add_argument("--k", type=int, default=None, help=K_HELP)
    add_metric_option(cross)
    add_group_options(cross, design=False)
    cross.add_argument("--strict", action="store_true", help=STRICT_HELP)
    add_common(cross)
    cross.set_defaults(handler=run_crossover)

    kstar = verbs.add_parser("kstar", help="best draft length per (alpha, RPS)")
    kstar.add_argument("fit", help="fit file")
    kstar.add_argument("--alpha", help="LIST of acceptance rates (i.i.d., eq. 3)")
    kstar.add_argument("--acceptance", metavar="COUNTERS",
                       help="instead of --alpha: a tidy file with the drafter's per-position "
                            "counters (num_drafts, accepted_tokens_pos1..k): k* from the "
                            "acceptance length E(k) they imply, any k up to --kmax")
    concurrency.add_load_axis(kstar)
    kstar.add_argument("--kmax", type=int, default=10, help="largest k considered (default 10)")
    kstar.add_argument("--objective", choices=("mean", "q10"), default="mean",
                       help="maximise expected speedup (mean) or its 10%% quantile (q10)")
    kstar.add_argument("--plot", help="write the k* map to this PNG")
    kstar.add_argument("--vllm", action="store_true",
                       help="also print a batch-size -> k schedule for vLLM (one --alpha; "
                            "batch size = RPS x latency by Little's law)")
    kstar.add_argument("--min-gain", type=float, default=0.02,
                       help="with --vllm: switch k only for a larger expected gain, in "
                            "speedup points (default 0.02)")
    add_group_options(kstar, design=False)
    kstar.add_argument("--strict", action="store_true", help=STRICT_HELP)
    add_common(kstar)
    kstar.set_defaults(handler=concurrency.on_load_axis(run_kstar))

    slo = verbs.add_parser(
        "slo", help="goodput under a latency SLO: the highest RPS each configuration meets "
                    "it at, and the best k per RPS (needs a `--model tails` fit)")
    slo.add_argument("fit", help="fit file of the tails model")
    targets = slo.add_argument_group("SLO targets in seconds (at least one)")
    for flag, metric in SLO_FLAGS.items():
        targets.add_argument(flag, type=float, dest=f"slo_{metric}", metavar="S",
                             help=f"{metric_description(metric)} at most S seconds")
    targets.add_argument("--target", action="append", default=[], metavar="METRIC=S",
                         help="any fitted summary, e.g. ttft_p95=0.3 (repeatable)")
    slo.add_argument("--rps", help="LIST of rates at which to choose a configuration "
                                   "(default: 12 rates up to the highest fitted)")
    slo.add_argument("--slo-prob", type=float, default=0.9,
                     help="probability with which the SLO must hold (default 0.9)")
    slo.add_argument("--plot", help="write the summaries' bands against the targets to this PNG")
    add_group_options(slo, design=False)
    slo.add_argument("--strict", action="store_true", help=STRICT_HELP)
    add_common(slo)
    slo.set_defaults(handler=run_slo)


#: Flags of the usual SLO targets -> metric.
SLO_FLAGS = {"--ttft-p99": "ttft_p99", "--ttft-p90": "ttft_p90", "--itl-p99": "itl_p99",
             "--itl-p90": "itl_p90", "--e2e-p99": "p99", "--e2e-p90": "p90"}


def add_metric_option(parser, *, compared: bool = True) -> None:
    what = "compared" if compared else "predicted"
    parser.add_argument("--metric", default="mean", metavar="METRIC",
                        help=f"latency summary {what}: mean (default), p50/p90/p95/p99 of "
                             "end-to-end latency, ttft_mean/ttft_pNN, itl_mean/itl_pNN "
                             "(summaries need a `--model tails` fit)")


def _ceiling_note(document: dict) -> str:
    """What ``*`` means in a document: rates above the highest fitted rate of the curves
    an answer compares, and configurations outside the measured design."""
    top = document.get("rps_fitted_max", document.get("rps_measured_max"))
    measured = document.get("measured") or {}
    lines = []
    if top is not None and np.isfinite(top):
        dense, sd = measured.get("dense_rps_fitted_max"), measured.get("sd_rps_fitted_max")
        if dense is not None and sd is not None:
            fitted = (f"highest fitted rate: {top:.4g} RPS (dense baseline fitted up to "
                      f"{dense:.4g}, this SD configuration up to {sd:.4g})")
        else:
            fitted = f"highest fitted rate: {top:.4g} RPS"
        lines.append(f"{fitted}; {EXTRAPOLATED}: above it, read off the fitted law")
    notes = measured.get("design_notes") or []
    if notes:
        lines.append(f"{EXTRAPOLATED} everywhere: " + "; ".join(notes)
                     + ": the configuration itself is the law's extrapolation")
    return "\n".join(lines)


def _binding(what: str) -> str:
    return ("the engine's concurrency cap" if what == "cap"
            else "1/C2: the engine's cap unknown")


def _alpha_text(alpha: float, law=None) -> str:
    if getattr(law, "joint_acceptance", False):
        return "acceptance from the counters"
    return "alpha as measured" if np.isnan(alpha) else f"alpha {alpha:g}"


def _mark(point: dict) -> str:
    return EXTRAPOLATED if point.get("extrapolated") else " "


def _request_count(fit, group: int, args) -> float | None:
    """``--requests``, or the median request count of the group's fitted points."""
    if args.requests is not None:
        if not (np.isfinite(args.requests) and args.requests >= 1):
            raise BadInput(f"must be a number of requests >= 1, got {args.requests:g}",
                           option="--requests")
        return float(args.requests)
    if "n_requests" not in fit.data.columns:
        return None
    counts = _fitted_rows(fit, group)["n_requests"].astype(float).dropna()
    return float(counts.median()) if len(counts) else None


def _fitted_rows(fit, group: int):
    """The rows of the fitted group that entered the likelihood."""
    data = fit.data
    label = fit.groups["label"].iloc[group]
    return data.loc[(data["group"] == label) & ~data["excluded"].astype(bool)]


def _whole_runs(fit, group: int) -> bool:
    """Whether the group's fitted points say they are whole runs from an idle server."""
    if "whole_run" not in fit.data.columns:
        return False
    flags = _fitted_rows(fit, group)["whole_run"]
    return bool(len(flags)) and bool(flags.fillna(False).astype(bool).all())


def run_predict(args) -> int:
    from bayesspec.decisions import predict_group

    check_prob(args)
    rps = rates(args.rps)
    fit = load_fit(args.fit)
    group = fit.select_group(**group_criteria(args))
    metric = fit.model().check_metric(fit, args.metric)
    whole = _whole_runs(fit, group)
    if args.requests is not None and metric is None and not whole:
        raise BadInput("a request count changes a mean only for whole runs from an idle "
                       "server (column whole_run), which this group's points are not; for a "
                       "summary's sampling error give --metric (p99, ttft_p99, ...)",
                       option="--requests")
    requests = _request_count(fit, group, args) if (metric or whole) else None
    document = finish(predict_group(fit, group, rps, prob=args.prob, metric=metric,
                                    n_requests=requests, whole_run=whole),
                      fit.diagnostics, args)
    if args.json:
        emit_json(document)
        return strict_exit(args, fit.diagnostics)
    print(f"group: {document['group']}   ({args.prob:.0%} intervals)")
    what = ("mean latency s" if metric is None
            else f"{metric_description(metric)} s")
    if metric is not None:
        print(f"{metric_description(metric)}: the curve is the summary of every request at "
              "that rate; a new measurement is "
              + (f"a load test's summary of {requests:.0f} requests" if requests
                 else "the law's value with the fitted noise (no request count)"))
    if document["whole_run"]:
        print(f"a new measurement is a whole run of {requests:.0f} requests from an idle "
              "server (its fill, drain and, past the ceiling, a finite queue); the curve is "
              "the steady state")
    print(f"{'RPS':>11}  {what + ' [interval]':>34}  {'new measurement s':>34}  "
          f"{'P(saturated)':>12}")
    top = document["rps_measured_max"]
    for point in document["points"]:
        between = (top, point["rps"])
        print(f"{point['rps']:>10.4g}{_mark(point)}  "
              f"{fmt(point['latency_s'], between=between):>34}  "
              f"{fmt(point['predictive_s'], between=between):>34}  "
              f"{point['p_saturated']:>12.3f}")
    binding = ("the engine's concurrency cap" if document["ceiling_binding"] == "cap"
               else "eq. (1)'s pole 1/C2; the engine's cap is unknown")
    print(f"ceiling (highest sustainable rate): {fmt(document['ceiling_rps'])} RPS, set by "
          f"{binding}")
    note = _ceiling_note(document)
    if note:
        print(note)
    return strict_exit(args, fit.diagnostics)


def _recommended_k(law, alpha: float, rps: np.ndarray) -> int | None:
    """The k the posterior recommends at the middle of the plotted rates (for the plot)."""
    from bayesspec.decisions import kstar_table

    if not law.answers_any_configuration:
        return None
    middle = float(np.median(rps))
    row = kstar_table(law, [alpha], [middle])["table"][0]
    return row["k"] if row["k"] > 0 else None


def _setup_law(args, fit):
    """The setup's law for a question comparing SD with dense, refused at once (with what
    to add) when the fit has no SD rows."""
    groups = fit.groups
    fit.model().check_metric(fit, getattr(args, "metric", None))   # a metric the fit lacks
    if not (groups["k"].to_numpy(int) > 0).any():
        raise BadInput("this fit has only dense groups (k = 0): speedup, crossover and k* "
                       "compare speculative decoding with plain decoding of the same "
                       "verifier and lengths. Add load tests with speculation (rows with "
                       "k > 0 and their alpha, or vLLM's acceptance counters), put them in "
                       "one file with these and fit --model speculative", file=args.fit)
    return fit.law(group_criteria(args), metric=getattr(args, "metric", None))


#: Group options -> the setup column each one names (k and alpha name configurations).
SETUP_OPTIONS = {"verifier": "verifier", "drafter": "drafter", "prefill": "prefill_tokens",
                 "decode": "decode_tokens", "gpu": "gpu"}


def _each_setup(args, fit) -> list:
    """The arguments of every SD setup the group options leave (one per setup, its
    options filled in): a question about several setups answers each, never one picked
    silently. [args] when they name one setup (or the fit has no setup table)."""
    import copy

    setups = fit.setups
    if setups.empty:
        return [args]
    mask = np.ones(len(setups), dtype=bool)
    for option, column in SETUP_OPTIONS.items():
        value = getattr(args, option, None)
        if value is not None and column in setups.columns:
            mask &= setups[column].astype(str).to_numpy() == str(value)
    chosen = setups.loc[mask]
    if len(chosen) <= 1:
        return [args]
    each = []
    for _, row in chosen.iterrows():
        named = copy.copy(args)
        for option, column in SETUP_OPTIONS.items():
            if column in row.index and row[column] is not None and str(row[column]) not in (
                    "", "nan", "<NA>"):
                value = row[column]
                setattr(named, option, int(value) if option in ("prefill", "decode")
                        else str(value))
        each.append(named)
    return each


def _speculative_law(args, fit):
    """The six-coefficient law k* and its schedule compare draft lengths with."""
    law = _setup_law(args, fit)
    if not law.answers_any_configuration:
        raise BadInput("k* compares draft lengths, which needs the six cycle "
                       "coefficients shared by every alpha and k: refit the same data "
                       "with --model speculative", file=args.fit)
    return law


def _answers(args, fit):
    """The (acceptance, k) pairs a speedup or crossover question answers, and what was
    ignored. By default the configuration measured: every acceptance the data measured
    for the setup (stated alphas; the counters' token process or learned alphas), each
    at its measured k (``--k``: at that k instead). ``--alpha`` is a what-if on eq. (3)
    at the measured k (or ``--k``), marked extrapolated outside the measured acceptance.
    A fit of the configurations alone answers only its fitted groups."""
    from bayesspec.decisions.speculative import (MeasuredAcceptance, eq3_law,
                                                 mark_measured_acceptance,
                                                 measured_acceptances)

    law = _setup_law(args, fit)
    if args.alpha is not None and law.answers_any_configuration:
        mark_measured_acceptance(fit, law, prob=args.prob)
        ks = [args.k] if args.k is not None else law.measured_ks
        if not ks:
            raise BadInput("the fit measured no draft length for this setup: give one",
                           option="--k")
        stated = any(abs(a - args.alpha) < 1e-9 for a in law.measured_alphas)
        asked = MeasuredAcceptance(f"alpha {args.alpha:g}" + ("" if stated else " (asked)"),
                                   eq3_law(law), float(args.alpha), ks,
                                   "stated" if stated else "what-if")
        return law, [(asked, k) for k in ks], ""
    if args.alpha is not None:
        fitted = getattr(law, "configurations", {})
        ks = ([args.k] if args.k is not None else
              sorted({k for a, k in fitted if a is None or abs(a - args.alpha) < 1e-9}))
        note = ""
        if args.k is not None and [a for a, k in fitted if k == args.k] == [None]:
            note = (f"--alpha {args.alpha:g} is not used: the fitted group at k {args.k} "
                    "has no alpha (its acceptance is what was measured); the answer is that "
                    "group's")
            log(f"note: {note}")
        asked = MeasuredAcceptance(f"alpha {args.alpha:g}", law, float(args.alpha),
                                   ks, "stated")
        return law, [(asked, k) for k in ks or [1]], note
    measured = measured_acceptances(fit, law)
    if args.k is not None and not law.answers_any_configuration:
        measured = [m for m in measured if args.k in m.ks] or measured
    if not measured:
        raise BadInput(f"the fit has no measured acceptance for '{law.label}' (no alpha "
                       "column, no counters): give the acceptance rate to answer at",
                       option="--alpha")
    return law, [(m, k) for m in measured
                 for k in ([args.k] if args.k is not None else m.ks)], ""


def _answered(document: dict, acceptance, *, metric: str, note: str) -> dict:
    """One answer's document, saying which acceptance it is at and where that came from."""
    return {**document, "acceptance": acceptance.name,
            "acceptance_source": acceptance.source, "metric": metric,
            **({"ignored": note} if note else {})}


def _several(law, answers: list[dict], metric: str) -> dict:
    """Several answers (one per measured configuration) in one document; one answer is
    its own document, as before."""
    if len(answers) == 1:
        return answers[0]
    setups = list(dict.fromkeys(answer["setup"] for answer in answers))
    return {"setup": setups[0] if len(setups) == 1 else "; ".join(setups),
            "metric": metric, "answers": answers}


def _acceptance_words(document: dict, law=None) -> str:
    source = document.get("acceptance_source")
    if source == "counters":
        return f"acceptance as measured ({document['acceptance']})"
    if source == "what-if":
        return f"alpha {document['alpha']:g} (asked, eq. 3)"
    return _alpha_text(document["alpha"], law)


def run_speedup(args) -> int:
    from bayesspec.decisions import speedup_curve

    check_prob(args)
    check_alpha_k(0.5 if args.alpha is None else args.alpha, 1 if args.k is None else args.k)
    rps = rates(args.rps)
    fit = load_fit(args.fit)
    law, answers, documents = None, [], []
    for setup_args in _each_setup(args, fit):
        law, answered, ignored = _answers(setup_args, fit)
        answers += answered
        documents += [_answered(speedup_curve(acceptance.law, acceptance.alpha, k, rps,
                                              prob=args.prob), acceptance,
                                metric=args.metric, note=ignored)
                      for acceptance, k in answered]
    document = finish(_several(law, documents, args.metric), fit.diagnostics, args)
    if args.plot:
        from bayesspec.reporting.plots import save_figure, speedup_bands_plot

        check_output_path(args.plot)
        acceptance, k = answers[0]
        if len({d["setup"] for d in documents}) > 1:
            raise BadInput("the plot draws one setup and the group options leave several: "
                           "choose one with the group options", option="--plot")
        if len({a.name for a, _ in answers}) > 1:
            raise BadInput("the plot draws one acceptance and the fit measured several ("
                           + ", ".join(dict.fromkeys(a.name for a, _ in answers))
                           + "): give --alpha", option="--plot")
        recommended = _recommended_k(acceptance.law, acceptance.alpha, rps)
        shown = sorted({kk for _, kk in answers})
        ks = (sorted(set(shown) | {1, 2, 4, 8} | ({recommended} if recommended else set()))
              if law.answers_any_configuration else shown)
        document["plot"] = save_figure(speedup_bands_plot(
            acceptance.law, acceptance.alpha, ks, rps_max=float(rps.max()), prob=args.prob,
            recommended_k=recommended, metric=args.metric), args.plot)
    if args.json:
        emit_json(document)
        return strict_exit(args, fit.diagnostics)
    for n, (answer, (acceptance, k)) in enumerate(zip(documents, answers)):
        if n:
            print()
        _print_speedup(answer, acceptance.law, k, args)
    if len(documents) > 1:
        print(f"\n{len(documents)} measured configurations answered (--alpha/--k for one, "
              "or for a what-if)")
    if args.plot:
        print(f"plot: {args.plot}")
    return strict_exit(args, fit.diagnostics)


def _print_speedup(document: dict, law, k: int, args) -> None:
    print(f"setup: {document['setup']}   {_acceptance_words(document, law)}, k {k}   "
          f"({args.prob:.0%} intervals)")
    if args.metric != "mean":
        print(f"speedup of {metric_description(args.metric)}: dense over SD")
    print(f"C1R (zero-load cost ratio) {fmt(document['C1R'])}   C2R (load cost ratio) "
          f"{fmt(document['C2R'])}")
    print(f"{'RPS':>11}  {'speedup [interval]':>30}  {'P(SD slower)':>12}")
    top = document["rps_measured_max"]
    for point in document["points"]:
        saturated = ("  SD saturated" if point["p_sd_saturated"] > 0.5 else "")
        print(f"{point['rps']:>10.4g}{_mark(point)}  "
              f"{fmt(point['speedup'], between=(top, point['rps'])):>30}  "
              f"{point['p_slower']:>12.3f}{saturated}")
    note = _ceiling_note(document)
    if note:
        print(note)


def run_crossover(args) -> int:
    from bayesspec.decisions import crossover

    check_prob(args)
    check_alpha_k(0.5 if args.alpha is None else args.alpha, 1 if args.k is None else args.k)
    fit = load_fit(args.fit)
    law, answers, documents = None, [], []
    for setup_args in _each_setup(args, fit):
        law, answered, ignored = _answers(setup_args, fit)
        answers += answered
        documents += [_answered(crossover(acceptance.law, acceptance.alpha, k,
                                          prob=args.prob), acceptance, metric=args.metric,
                                note=ignored)
                      for acceptance, k in answered]
    document = finish(_several(law, documents, args.metric), fit.diagnostics, args)
    if args.json:
        emit_json(document)
        return strict_exit(args, fit.diagnostics)
    for n, (answer, (acceptance, k)) in enumerate(zip(documents, answers)):
        if n:
            print()
        _print_crossover(answer, acceptance.law, k, args)
    return strict_exit(args, fit.diagnostics)


def _print_crossover(document: dict, law, k: int, args) -> None:
    print(f"setup: {document['setup']}   {_acceptance_words(document, law)}, k {k}")
    if args.metric != "mean":
        print(f"crossover of {metric_description(args.metric)}: the rate above which SD "
              "makes it worse")
    if document["rps_star"] is None:
        print(f"no crossover below saturation in any draw (P = {document['p_crossover']:.3f}): "
              f"the sign of the gain does not change with load")
    else:
        direction = ("SD is faster below RPS* and slower above it"
                     if document["p_sd_faster_below"] >= 0.5 else
                     "SD is slower below RPS* and faster above it")
        top = document["rps_measured_max"]
        star = fmt(document["rps_star"], between=(top, document["rps_star"]["hi"]))
        print(f"RPS* = {star} in {document['p_crossover']:.1%} of draws; {direction}")
        if document["extrapolated"]:
            above = (f"RPS* lies above the highest fitted rate ({top:.4g} RPS; P beyond it "
                     f"{document['p_beyond_measured']:.2f})"
                     if top is not None and document["p_beyond_measured"] is not None
                     and document["rps_star"]["median"] > top else
                     "the configuration lies outside the measured design")
            print(f"note: {above}: an extrapolation of the fitted law")
    binding = document["ceiling_binding"]
    print(f"ceilings: SD {fmt(document['saturation_rps'])} RPS ({_binding(binding['sd'])}); "
          f"dense {fmt(document['dense_saturation_rps'])} RPS ({_binding(binding['dense'])})")
    note = _ceiling_note(document)
    if note:
        print(note)
    print(f"C1R {fmt(document['C1R'])}   C2R {fmt(document['C2R'])}")


def _kstar_acceptances(args, fit, law, alphas, verdicts: list):
    """The acceptances k* is asked at, as :class:`MeasuredAcceptance` (law, alphas):
    ``--alpha`` (what-ifs on eq. (3), marked outside the measured acceptance);
    ``--acceptance`` (E(k) of another file's counters); by default every acceptance
    the data measured for the setup."""
    from bayesspec.decisions.speculative import (MeasuredAcceptance, eq3_law,
                                                 mark_measured_acceptance,
                                                 measured_acceptances)

    if alphas is not None:
        mark_measured_acceptance(fit, law, prob=args.prob)
        return [MeasuredAcceptance("alpha (asked)", eq3_law(law), float(a), [], "what-if")
                for a in alphas], alphas
    if args.acceptance is not None:
        from bayesspec.bayes.acceptance import acceptance_length_draws
        from bayesspec.data import read_counters
        from bayesspec.inference import SamplerSettings

        counters = read_counters(args.acceptance)   # every window counts, saturated too
        lengths, setup, verdict, counted_ks = acceptance_length_draws(
            counters, args.kmax, drafter=getattr(args, "drafter", None),
            settings=SamplerSettings(seed=0, progress=False))
        counted_drafter = setup.split(" + ", 1)[-1].split(" (", 1)[0]
        if counted_drafter.lower() not in law.label.lower():
            log(f"warning: the counters are of drafter '{counted_drafter}', the fitted setup "
                f"is '{law.label}': the acceptance of one drafter is applied to the costs of "
                "another")
        verdicts.append(verdict)
        args.acceptance_setup, args.acceptance_verdict = setup, verdict
        counted = eq3_law(law).with_acceptance_lengths(lengths, measured_ks=counted_ks)
        return [MeasuredAcceptance(f"counters of {args.acceptance}", counted, float("nan"),
                                   sorted(counted_ks), "counters")], None
    measured = measured_acceptances(fit, law)
    if not measured:
        raise BadInput(f"the fit has no measured acceptance for '{law.label}' (no alpha "
                       "column, no counters): give --alpha (acceptance rates) or "
                       "--acceptance (a file of per-position counters)", option="--alpha")
    return measured, None


def _prompt_lengths(args, fit) -> list[int] | None:
    """The prompt lengths a `kstar --vllm` schedule spans as its context axis: where the
    group options leave several setups that differ in prompt length alone (None: one
    setup, or setups told apart by more than their prompt length)."""
    from bayesspec.inference.fitfile import SELECTORS

    setups = fit.setups
    if args.prefill is not None or setups.empty or "prefill_tokens" not in setups:
        return None
    mask = np.ones(len(setups), dtype=bool)
    for option, value in group_criteria(args).items():
        column = SELECTORS.get(option)
        if value is not None and column in setups.columns:
            mask &= setups[column].astype(str).to_numpy() == str(value)
    chosen = setups.loc[mask]
    varying = [column for column in set(SELECTORS.values()) if column in chosen.columns
               and chosen[column].astype(str).nunique() > 1]
    if varying != ["prefill_tokens"]:
        return None
    return sorted(int(p) for p in chosen["prefill_tokens"].unique())


def run_kstar(args) -> int:
    import copy

    from bayesspec.decisions import kstar_table, vllm_schedule
    from bayesspec.decisions.schedule import context_schedule

    check_prob(args)
    if args.alpha is not None and args.acceptance is not None:
        raise BadInput("give one of --alpha (acceptance rates) and --acceptance (a file of "
                       "per-position counters)", option="--alpha")
    alphas = None
    if args.alpha is not None:
        alphas = parse_list(args.alpha, option="--alpha")
        if np.any((alphas < 0) | (alphas > 1)):
            raise BadInput("values must be within [0, 1]", option="--alpha")
    elif args.plot:
        raise BadInput("the k* map is over alpha: give --alpha LIST (with measured "
                       "acceptance see `bayesspec acceptance --plot`)", option="--plot")
    rps = rates(args.rps)
    if not 1 <= args.kmax <= 64:
        raise BadInput(f"must be within 1..64, got {args.kmax}", option="--kmax")
    if args.vllm and args.min_gain < 0:
        raise BadInput(f"must be >= 0, got {args.min_gain:g}", option="--min-gain")
    fit = load_fit(args.fit)
    verdicts = [fit.diagnostics]
    prompts = _prompt_lengths(args, fit) if args.vllm else None
    ks = range(0, args.kmax + 1)
    table, schedules, document = [], [], None
    if prompts:
        selections = []
        for prefill in prompts:
            band = copy.copy(args)
            band.prefill = prefill
            selections.append(band)
    else:
        selections = _each_setup(args, fit)
    labels = []
    for band in selections:
        prefill = band.prefill
        law = _speculative_law(band, fit)
        labels.append(law.label)
        acceptances, asked = _kstar_acceptances(args, fit, law, alphas, verdicts)
        groups = ([(acceptances[0], asked)] if asked is not None else
                  [(a, np.array([a.alpha])) for a in acceptances])
        for acceptance, at in groups:
            part = concurrency.kstar_on_axis(args, kstar_table, fit)(
                acceptance.law, at, rps, ks=ks, objective=args.objective, prob=args.prob)
            for row in part["table"]:
                row["acceptance"] = (acceptance.name if acceptance.source != "what-if"
                                     else f"alpha {row['alpha']:g} (asked)")
                if prompts:
                    row["prefill_tokens"] = prefill
                if len(selections) > 1:
                    row["setup"] = law.label
            table += part["table"]
            document = document or part
            if not args.vllm:
                continue
            for alpha in at:
                schedule = vllm_schedule(acceptance.law, float(alpha), rps, ks=ks,
                                         min_gain=args.min_gain, prob=args.prob)
                schedule["acceptance"] = (acceptance.name if acceptance.source != "what-if"
                                          else f"alpha {alpha:g} (asked)")
                schedule["setup"] = law.label
                if prompts:
                    row = fit.setups.iloc[fit.select_setup(**group_criteria(band))]
                    schedule["prefill_tokens"] = int(prefill)
                    schedule["decode_tokens"] = int(row["decode_tokens"])
                schedules.append(schedule)
    document["table"] = table
    if prompts:
        document["setup"] += (f" (and the same setup at {len(prompts) - 1} other prompt "
                              "length(s))")
    elif len(labels) > 1:
        document["setup"] = "; ".join(labels)
    if args.vllm:
        document["vllm"] = _vllm_document(schedules, prompts, context_schedule)
    if args.acceptance is not None:
        verdict = args.acceptance_verdict
        document["acceptance"] = {"file": args.acceptance, "setup": args.acceptance_setup,
                                  "convergence": verdict["status"]}
        if not verdict["converged"]:
            log(f"warning: acceptance by position: {verdict['text']}")
    document = finish(document, fit.diagnostics, args)
    if args.plot:
        from bayesspec.reporting.plots import kstar_map_plot, save_figure

        check_output_path(args.plot)
        document["plot"] = save_figure(kstar_map_plot(document), args.plot)
    if args.json or args.concurrency is not None:
        return concurrency.answer_kstar(document, args, verdicts)
    if args.acceptance is not None:
        print(f"acceptance: E(k) from the per-position counters of {args.acceptance_setup} "
              f"in {args.acceptance} (alpha column: measured)")
    sources = list(dict.fromkeys(row["acceptance"] for row in table))
    if alphas is None and args.acceptance is None:
        print("acceptance: as measured: " + "; ".join(sources))
    print(f"setup: {document['setup']}   objective: {args.objective}   k = 0 means "
          f"'do not speculate'")
    several = len(sources) > 1 and alphas is None
    print(f"{'alpha':>6} {'RPS':>10} {'k*':>5} {'P(best)':>8} {'speedup [interval]':>28} "
          f"{'batch-1 k':>9} {'loss vs batch-1 k (speedup points)':>35}"
          + ("  acceptance" if several else "") + ("  prompt" if prompts else "")
          + ("  setup" if len(labels) > 1 and not prompts else ""))
    for row in table:
        k = f">={row['k']}" if row["at_max_k"] else str(row["k"])
        alpha = "meas." if np.isnan(row["alpha"]) else f"{row['alpha']:.3g}"
        print(f"{alpha:>6} {row['rps']:>9.4g}{_mark(row)} {k:>5} "
              f"{row['p_best']:>8.2f} {fmt(row['speedup']):>28} {row['k_batch1']:>9} "
              f"{row['loss_vs_batch1']:>35.3f}"
              + (f"  {row['acceptance']}" if several else "")
              + (f"  {row['prefill_tokens']}" if prompts else "")
              + (f"  {row['setup']}" if "setup" in row and not prompts else ""))
    if any(row["at_max_k"] for row in table):
        print(f">={args.kmax}: the best k is the largest searched; raise --kmax to look further")
    if kstar_note(document):
        print(kstar_note(document))
    if args.plot:
        print(f"plot: {args.plot}")
    if args.vllm:
        print()
        print(vllm_text(document["vllm"]))
    return strict_exit(args, verdicts)


def _vllm_document(schedules: list[dict], prompts, context_schedule) -> dict | list:
    """``kstar --vllm``'s JSON: the schedule (one acceptance, one prompt length); a
    schedule over batch size and context length (one acceptance per prompt length, the
    context axis); else every schedule, one per acceptance (and prompt length)."""
    if len(schedules) == 1:
        return schedules[0]
    if prompts and len(schedules) == len(prompts):
        combined = context_schedule(schedules)
        return {**combined, "schedules": schedules, "context_axis": True}
    return schedules


def vllm_text(vllm) -> str:
    """`kstar --vllm`'s text: each schedule, then the pasteable configuration."""
    import json

    if isinstance(vllm, list):
        return "\n\n".join(f"setup: {s.get('setup', '')}, acceptance: {s['acceptance']}"
                           + (f", prompt {s['prefill_tokens']} tokens"
                              if "prefill_tokens" in s else "")
                           + "\n" + schedule_text(s) for s in vllm)
    if not vllm.get("context_axis"):
        return schedule_text(vllm)
    parts = [f"prompt {s['prefill_tokens']} tokens (context {b['context_min']}-"
             f"{b['context_max'] if b['context_max'] < 2**31 - 1 else 'any'}):\n"
             + schedule_text(s) for s, b in zip(vllm["schedules"], vllm["context_bands"])]
    parts.append("one schedule over batch size and context length, "
                 "[start_bs, end_bs, ctx_lo, ctx_hi, K] (vLLM's dynamic speculative "
                 "decoding with its context axis):\nspeculative_config: "
                 + json.dumps(vllm["speculative_config"]))
    return "\n\n".join(parts)


def kstar_note(document: dict) -> str:
    """What ``*`` means on a k* table: each row rests on the chosen k and the dense
    baseline, measured up to the lower of their highest fitted rates, at the measured
    alphas and draft lengths."""
    tops = {row["k"]: row["rps_fitted_max"] for row in document["table"][::-1]
            if row.get("rps_fitted_max") is not None and not row["design_notes"]}
    notes = sorted({note for row in document["table"] for note in row["design_notes"]})
    return "\n".join(
        ([f"{EXTRAPOLATED}: above the highest fitted rate of the chosen k and the dense baseline "
          "(" + ", ".join(f"k* = {k} up to {top:.4g}" for k, top in sorted(tops.items()))
          + " RPS): read off the fitted law"] if tops else [])
        + ([f"{EXTRAPOLATED} also marks rows whose answer lies outside the measured design: "
            + "; ".join(notes)] if notes else []))


def schedule_text(schedule: dict) -> str:
    """The vLLM schedule as a person reads it: ranges, switches and how sure each is."""
    at = (f"alpha {schedule['alpha']:g}" if np.isfinite(schedule["alpha"])
          else f"acceptance as measured ({schedule.get('acceptance', 'the counters')})")
    lines = [f"vLLM schedule at {at} (batch size = running requests "
             f"= RPS x latency, Little's law; k switched only for > {schedule['min_gain']:g} "
             "expected speedup points)",
             f"{'batch size':>12} {'k':>4} {'RPS':>17} {'P(best)':>8} "
             f"{'speedup [interval]':>28}"]
    for row in schedule["ranges"]:
        sizes = (f"{row['batch_min']}-{row['batch_max']}" if row["batch_max"] is not None
                 else f"{row['batch_min']}+")
        rates = f"{row['rps_min']:.3g}-{row['rps_max']:.3g}"
        k = "off" if row["k"] == 0 else str(row["k"])
        lines.append(f"{sizes:>12} {k:>4} {rates:>16}{EXTRAPOLATED if row['extrapolated'] else ' '}"
                     f" {row['p_best']:>8.2f} {fmt(row['speedup']):>28}")
    for switch in schedule["switches"]:
        interval = switch["batch_interval"]
        where = (f"{interval['lo']:.0f}-{interval['hi']:.0f}" if interval else "unknown")
        if not switch["pinned"]:
            lines.append(f"warning: the switch k {switch['from_k']} -> {switch['to_k']} at "
                         f"batch {switch['batch']} is not pinned down by the data (90% of "
                         f"draws put it at batch {where}; in "
                         f"{switch['p_switch_in_range']:.0%} of draws it happens within the "
                         "searched rates): measure near that load before relying on it")
    import json

    lines.append("num_speculative_tokens_per_batch_size: "
                 + json.dumps(schedule["num_speculative_tokens_per_batch_size"]))
    lines.append("speculative_config (vLLM today): "
                 + json.dumps(schedule["speculative_config"]))
    return "\n".join(lines)


def _slo_targets(args) -> dict[str, float]:
    targets = {metric: getattr(args, f"slo_{metric}") for metric in SLO_FLAGS.values()
               if getattr(args, f"slo_{metric}") is not None}
    for text in args.target:
        metric, _, value = text.partition("=")
        try:
            targets[metric.strip()] = float(value)
        except ValueError:
            raise BadInput(f"'{text}' is not METRIC=SECONDS", option="--target") from None
    if not targets:
        raise BadInput("give at least one SLO target, e.g. --ttft-p99 0.5 --itl-p99 0.05",
                       option="--ttft-p99")
    for metric, value in targets.items():
        if not np.isfinite(value) or value <= 0:
            raise BadInput(f"target for {metric} must be a positive number of seconds, got "
                           f"{value:g}", option="--target")
    return targets


def run_slo(args) -> int:
    from bayesspec.decisions import slo_decision

    check_prob(args)
    targets = _slo_targets(args)
    fit = load_fit(args.fit)
    known = fit.model().metrics(fit)
    if not known:
        raise BadInput(f"this {fit.model_name} fit models mean latency only; an SLO on "
                       f"{', '.join(targets)} needs a fit of `--model tails` on data with "
                       "percentile columns (latency_p99_s, ttft_p99_s, itl_p99_s, ...)",
                       file=args.fit)
    missing = [metric for metric in targets if metric not in known]
    if missing:
        raise BadInput(f"this fit has no law for {', '.join(missing)}; it answers "
                       f"{', '.join(known)}", option="--target")
    selection = group_criteria(args)
    ranked_by = ranking_metric(fit, targets)
    mean_law = fit.law(selection, metric=None if ranked_by == "mean" else ranked_by)
    laws = {metric: fit.law(selection, metric=metric) for metric in targets}
    if args.rps is not None:
        rps = rates(args.rps, positive=True)
    else:
        top = mean_law.measured(None, 0)["rps_fitted_max"]
        if not np.isfinite(top):
            top = float(np.median(mean_law.dense.ceiling))
        rps = np.round(np.linspace(top / 12, top, 12), 4)
    document = finish(slo_decision(laws, mean_law, targets, rps, slo_prob=args.slo_prob,
                                   prob=args.prob, ranked_by=ranked_by), fit.diagnostics, args)
    if args.plot:
        from bayesspec.reporting.plots import save_figure, slo_plot

        check_output_path(args.plot)
        document["plot"] = save_figure(slo_plot(laws, document, fit=fit, prob=args.prob),
                                       args.plot)
    if args.json:
        emit_json(document)
        return strict_exit(args, fit.diagnostics)
    print(slo_text(document, args.prob))
    if args.plot:
        print(f"plot: {args.plot}")
    return strict_exit(args, fit.diagnostics)


def ranking_metric(fit, targets: dict) -> str:
    """What ranks the configurations that meet an SLO: the mean latency, or for a fit of
    percentiles alone (no mean) the median end-to-end latency, else the first target's
    summary."""
    model = fit.model()
    if model.has_mean(fit):
        return "mean"
    return "p50" if "p50" in model.metrics(fit) else next(iter(targets))


def slo_text(document: dict, prob: float) -> str:
    slo = ", ".join(f"{metric_description(m)} <= {t:g} s" for m, t in document["slo"].items())
    need = document["slo_prob"]
    lines = [f"setup: {document['setup']}",
             f"SLO: {slo}; met with probability >= {need:g}",
             "",
             f"{'configuration':<22} {'goodput RPS [' + format(prob, '.0%') + ' interval]':>36}"
             f"  {'RPS at P>=' + format(need, 'g'):>12}  binding target"]
    beyond = []
    for entry in document["configurations"]:
        binding = max(entry["binding"], key=entry["binding"].get)
        mark = EXTRAPOLATED if entry["extrapolated"] else " "
        if entry["extrapolated"]:
            beyond.append(f"{entry['configuration']} (fitted up to "
                          f"{entry['rps_fitted_max']:.4g} RPS)")
        lines.append(f"{entry['configuration']:<22} {fmt(entry['goodput_rps']):>36}  "
                     f"{entry['rps_meeting_slo']:>11.4g}{mark}  {binding} "
                     f"({entry['binding'][binding]:.0%} of draws)")
    if beyond:
        lines.append(f"{EXTRAPOLATED}: above that configuration's highest fitted rate, read off "
                     "the law's extrapolation (its interval is too narrow there): "
                     + "; ".join(beyond))
    ranked_by = document.get("ranked_by", "mean")
    lines += ["", f"best configuration per rate (meets the SLO with P >= {need:g}, then lowest "
              f"{metric_description(ranked_by)}):",
              f"{'RPS':>11}  {'best':<22} {'P(best)':>8}  P(meets SLO) per configuration"]
    for row in document["best_by_rps"]:
        meets = "  ".join(f"{name.split(',')[0]}: {p:.2f}" for name, p in row["p_meets"].items())
        best = row["configuration"] or "none meets the SLO"
        p_best = f"{row['p_best']:.2f}" if row["p_best"] is not None else "-"
        mark = EXTRAPOLATED if row["extrapolated"] else " "
        lines.append(f"{row['rps']:>10.4g}{mark}  {best:<22} {p_best:>8}  {meets}")
    if any(row["extrapolated"] for row in document["best_by_rps"]):
        lines.append(f"{EXTRAPOLATED}: above the highest fitted rate of the configuration chosen "
                     "(where none meets the SLO, of a configuration judged): read off the "
                     "fitted law")
    return "\n".join(lines)
