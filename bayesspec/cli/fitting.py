"""``bayesspec fit``, ``summary`` and ``compare-models``: a posterior, its summary, and
PSIS-LOO between fits of the same data."""

from __future__ import annotations

import json
import os

import numpy as np

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json, log
from bayesspec.cli.common import (add_catalog, add_common, add_engine_limit_options, add_model_options,
                     add_sampler_options, add_saturation_options, check_output_path,
                     check_prob, finish, g, load_fit, model_options, read_data,
                     sampler_settings, strict_exit)

MODEL_HELP = ("dense (one C1, C2 per group), dense-discrepancy (dense with a pooled "
              "second-order term and per-group noise: admits misfit), dense-spline (dense "
              "times a pooled piecewise-linear discrepancy in the rate: intervals widen "
              "above the data), dense-roofline (the larger of a memory-bound and a "
              "compute-bound law), tails (dense plus p90/p99 of latency, TTFT and ITL: for "
              "slo and --metric), speculative (six cycle coefficients shared by every alpha "
              "and k), moe (covered/saturated split), or hierarchical (the coefficients on "
              "scaling trends across verifiers, drafters and lengths)")


def register(verbs) -> None:
    fit = verbs.add_parser("fit", help="sample the posterior of a latency model")
    fit.add_argument("data", help="tidy CSV or Parquet file (`bayesspec ingest` makes one "
                                  "from GuideLLM / vllm bench files)")
    fit.add_argument("-o", "--output", required=True, help="fit file to write (NetCDF)")
    fit.add_argument("--model", default="dense", help=f"{MODEL_HELP} (default: dense)")
    add_model_options(fit, "run_effect=shared (dense)")
    add_saturation_options(fit)
    add_engine_limit_options(fit)
    add_catalog(fit)
    fit.add_argument("--no-loo", action="store_true",
                     help="skip PSIS-LOO after sampling (saves a few seconds)")
    add_sampler_options(fit)
    add_common(fit, prob=False)
    fit.set_defaults(handler=run_fit)

    summary = verbs.add_parser("summary", help="coefficients with intervals, diagnostics")
    summary.add_argument("fit", help="fit file")
    summary.add_argument("--loo", action="store_true",
                         help="compute PSIS-LOO if the fit file does not hold it")
    summary.add_argument("--strict", action="store_true",
                         help="exit with status 3 when the posterior did not converge")
    add_common(summary)
    summary.set_defaults(handler=run_summary)

    compare_models = verbs.add_parser(
        "compare-models", help="PSIS-LOO comparison of fits of the same data (az.compare)")
    compare_models.add_argument("fits", nargs="+", metavar="FIT", help="fit files")
    compare_models.add_argument("--strict", action="store_true",
                                help="exit with status 3 when a posterior did not converge")
    add_common(compare_models, prob=False)
    compare_models.set_defaults(handler=run_compare_models)


def diagnostics_json(verdict: dict) -> dict:
    return {"rhat_max": verdict["rhat_max"], "ess_bulk_min": verdict["ess_bulk_min"],
            "divergences": verdict["divergences"]}


def verdict_line(verdict: dict) -> str:
    if verdict.get("method", "nuts") != "nuts":
        return (f"diagnostics: {verdict['method']} approximation, Pareto k "
                f"{verdict['pareto_k']:.2f} -> "
                f"{'NOT CONVERGED' if verdict['status'] == 'not converged' else 'OK'}: "
                f"{verdict['text']}")
    return (f"diagnostics: R-hat max {g(verdict['rhat_max'])}, bulk ESS min "
            f"{verdict['ess_bulk_min']:.0f}, divergences {verdict['divergences']} -> "
            f"{verdict['status'].upper() if verdict['status'] == 'not converged' else 'OK'}: "
            f"{verdict['text']}")


def approximation_json(attrs, asked: str) -> dict:
    """The method asked for and the one the draws came from, with the approximation's
    Pareto k and the NUTS fallback when there was one."""
    document = {"asked": asked, "used": str(attrs.get("method", "nuts"))}
    if "pareto_k" in attrs:
        document["pareto_k"] = float(attrs["pareto_k"])
        document["importance_ess"] = attrs.get("importance_ess")
        document["approximation_seconds"] = attrs.get("approximation_seconds")
    if attrs.get("fallback"):
        document["fallback"] = str(attrs["fallback"])
    return document


def set_aside(data) -> list[dict]:
    """The rows left out of the likelihood: 1-based data row, rate and why."""
    rows = [i for i, excluded in enumerate(data["excluded"].to_numpy(bool)) if excluded]
    return [{"row": int(i) + 1, "rps": float(data["rps"].iloc[i]),
             "reason": str(data["exclusion_reason"].iloc[i])} for i in rows]


def concurrency_cap_note(data, cap_prior: str | None = None) -> str:
    """Where the engine's concurrency cap came from, or that it is unknown (said once)."""
    import numpy as np

    from bayesspec.data import assign_groups, concurrency_caps, included

    rows = included(data)
    caps, sources = concurrency_caps(rows)
    known = np.isfinite(caps)
    if not known.any():
        if cap_prior:
            return (f"concurrency cap: not stated; learned per group from where the curve "
                    f"bends, with the {cap_prior} prior (its posterior is the prior where "
                    "the sweep stops short of the bend; `summary` shows it)")
        return ("concurrency cap: unknown (no max_num_seqs / kv_cache_tokens column or "
                "flag): eq. (1) is fitted alone and its pole 1/C2 is read as the ceiling, "
                "which the engine's batch cap usually undercuts; give --max-num-seqs N "
                "(vLLM's setting) or --kv-cache-tokens N (its start-up log) when you know "
                "it, or --cap-prior catalog to learn it from the curve")
    groups, index = assign_groups(rows)
    labels = groups["label"].to_numpy(object)[index]
    by_cap: dict[tuple, list[str]] = {}
    for cap, source, label in zip(caps[known], np.asarray(sources)[known], labels[known]):
        members = by_cap.setdefault((float(cap), source), [])
        if label not in members:
            members.append(label)
    if len(by_cap) == 1 and known.all():
        (cap, source), = by_cap
        text = f"{cap:.0f} requests ({source}) in every group"
    else:
        text = "; ".join(f"{cap:.0f} requests ({source}) for {labels_in_short(members)}"
                         for (cap, source), members in sorted(by_cap.items()))
    unknown = list(dict.fromkeys(labels[~known]))
    missing = f"; unknown for {labels_in_short(unknown)}" if unknown else ""
    return f"concurrency cap: {text}{missing}: the law kinks at it and its ceiling binds"


def labels_in_short(labels: list[str]) -> str:
    """Group labels said once: one label as it is; several as the words they share and,
    in parentheses, what sets each apart ('Qwen3-8B +EAGLE3 p512 g512 (k2 a0.7, k3 a0.8)')."""
    if len(labels) == 1:
        return labels[0]
    words = [label.split() for label in labels]
    shared = [w for w in words[0] if all(w in other for other in words[1:])]
    own = [" ".join(w for w in split if w not in shared) for split in words]
    if not shared or not all(own):       # one label inside another: say them whole
        return ", ".join(labels)
    return f"{' '.join(shared)} ({', '.join(own)})"


def cap_left_out_note(result) -> str | None:
    """How the fit settled the stated caps its fitted points stay below (None: nothing
    to say, every cap in the likelihood as the data put it)."""
    attrs = result.tree.attrs
    check, share = attrs.get("cap_check"), attrs.get("cap_reach_share")
    if check == "left out":
        groups = result.groups
        count = (int(groups["cap_left_out_on_trust"].sum())
                 if "cap_left_out_on_trust" in groups else 0)
        return (f"the cap is out of the likelihood in {count} of {len(groups)} groups: their "
                "fitted points stay below where it moves the latency, and no posterior draw "
                "says otherwise; it still sets their ceiling")
    if check == "reweighted":
        return ("the cap was left out of the sampled likelihood, then its slot queue "
                f"weighed in: it moves the fitted points in {share:.1%} of the draws, which "
                "were reweighted by the model with it (effective share "
                f"{attrs.get('cap_importance_ess_share', float('nan')):.2f}); the posterior "
                "is the capped law's")
    if check == "refitted":
        return (f"the cap would move the fitted points in {share:.1%} of the draws: fitted "
                "again with its slot queue in the likelihood")
    return None


def run_fit(args) -> int:
    check_output_path(args.output)
    settings = sampler_settings(args)
    data = read_data(args.data, args)
    cap_note = concurrency_cap_note(data, args.cap_prior)
    log(cap_note)
    # Imported after the data are read: loading PyMC takes seconds, a bad file should not.
    from bayesspec.bayes.workflow import fit
    from bayesspec.cli.common import catalog_of

    options = model_options(args)
    from bayesspec.inference.sampling import SamplingFailed

    try:
        result = fit(data, args.model, settings=settings, config=options or None,
                     catalog=catalog_of(args))
    except SamplingFailed as error:
        raise BadInput(error.reason, file=args.data) from None
    left_out = cap_left_out_note(result)
    if left_out:
        log(left_out)
        cap_note = f"{cap_note}; {left_out}"
    profile_note = decode_profile_note(result) if args.decode_profile else None
    if profile_note:
        log(profile_note)
    from bayesspec.bayes.options import resolved_line, resolved_options

    resolved = resolved_options(result)
    if resolved_line(resolved):
        log(resolved_line(resolved))
    law_note = result.model().recorded.get("mean_law_note")
    if law_note:
        log(law_note)
    verdict = result.diagnostics
    if not args.no_loo:
        _store_loo(result)
    result.save(args.output)
    from bayesspec.inference import thin_groups
    from bayesspec.reporting.summary import answerable

    questions = answerable(result)
    thin = thin_groups(result.data, getattr(result.model(), "curve_parameters", 2))
    from bayesspec.bayes.cap_prior import chains_disagree

    cap_chains = chains_disagree(result)
    if cap_chains:
        log(f"warning: {cap_chains}")
    document = {"fit": args.output, "model": args.model, "options": options,
                "resolved_options": {name: entry["value"] for name, entry in resolved.items()},
                "groups": len(result.groups),
                "rows": len(data), "excluded": int(data["excluded"].sum()),
                "set_aside": set_aside(data), "concurrency_cap": cap_note,
                **({"learned_cap_chains": cap_chains} if cap_chains else {}),
                **({"decode_profile": profile_note} if profile_note else {}),
                **({"mean_law": law_note} if law_note else {}),
                "questions": questions, "thin_groups": thin,
                "fit_seconds": result.tree.attrs.get("fit_seconds"),
                "diagnostics": diagnostics_json(verdict),
                "method": approximation_json(result.tree.attrs, settings.method)}
    # In text mode the verdict is the last line on stdout; said once, not twice.
    finish(document, verdict, args, say=args.json)
    if args.json:
        emit_json(document)
    else:
        print(f"fitted {args.model} model to {len(data)} rows in {len(result.groups)} groups "
              f"in {result.tree.attrs.get('fit_seconds', 0):.1f} s -> {args.output}")
        print(questions_text(questions))
        if thin:
            from bayesspec.inference import design_advice

            print(f"note: {len(thin)} group(s) have fewer rates than a curve needs: "
                  f"{design_advice(thin)}")
        print(verdict_line(verdict))
    return strict_exit(args, verdict)


def decode_profile_note(result) -> str:
    """Which fitted groups follow the profile, said once."""
    has = result.groups.get("decode_profile")
    count = int(np.asarray(has, dtype=bool).sum()) if has is not None else 0
    total = len(result.groups)
    config = result.model_config
    law = {"chain": "the profile inside the slot queue's chain",
           "poisson": "the profile at the law's own N"}.get(config.get("profile_law"), "")
    if law:
        bounded = config.get("noise_load_at") == "measured"
        batched = config.get("prefill_batching") is True
        law = (f"; law: {law}"
               f"{', waiting prompts prefilled together' if batched else ''}, the noise's "
               f"load term {'bounded by each measurement' if bounded else 'on the curve'} "
               "(--option profile_law=chain|poisson, noise_load_at=measured|curve"
               f"{', prefill_batching=true|false' if config.get('profile_law') == 'chain' else ''})")
    if count == total:
        return f"decode profile: all {total} group(s) follow it{law}"
    missing = result.groups["label"][~np.asarray(has, dtype=bool)].tolist()
    return (f"decode profile: {count} of {total} group(s) follow it; no profile for "
            f"{'; '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} (eq. (1) there)"
            f"{law}")


#: setups named in full on a family's line; the rest are counted
FAMILY_NAMES_SHOWN = 3


def questions_text(questions: list[dict]) -> str:
    """What the fit answers and cannot, one line per family of setups (setups that answer
    and cannot answer the same questions), as a person reads it."""
    families: dict[tuple, list[str]] = {}
    for entry in questions:
        key = (tuple(entry["answers"]), tuple(entry["cannot"]))
        families.setdefault(key, []).append(str(entry["setup"]))
    lines = ["questions this fit answers:"]
    for (answers, cannot), setups in families.items():
        named = ", ".join(setups[:FAMILY_NAMES_SHOWN])
        if len(setups) > FAMILY_NAMES_SHOWN:
            named += f" and {len(setups) - FAMILY_NAMES_SHOWN} more"
        who = named if len(setups) == 1 else f"{len(setups)} setups ({named})"
        said = "; ".join(answers) if answers else "nothing"
        if cannot:
            said += "; cannot: " + "; ".join(cannot)
        lines.append(f"  {who}: {said}")
    return "\n".join(lines)


def _store_loo(result) -> None:
    """PSIS-LOO at fit time, kept in the fit file's attrs (not the pointwise matrix)."""
    from bayesspec.checks import loo_summary

    try:
        loo = loo_summary(result)
    except Exception as error:  # noqa: BLE001 - LOO is a report, never a reason to fail
        loo = {"error": f"PSIS-LOO failed: {error}"}
    if "log_likelihood" in result.tree.children:
        del result.tree["log_likelihood"]
    result.tree.attrs["loo"] = json.dumps(loo)
    if loo.get("warning"):
        log(f"warning: {loo['warning']}")


def run_summary(args) -> int:
    from bayesspec.reporting.summary import summary_document, summary_text

    check_prob(args)
    fit = load_fit(args.fit)
    document = summary_document(fit, prob=args.prob)
    if "loo" in fit.tree.attrs:
        document["loo"] = json.loads(fit.tree.attrs["loo"])
    elif args.loo:
        from bayesspec.checks import loo_summary

        document["loo"] = loo_summary(fit)
    if document.get("loo", {}).get("warning"):
        log(f"warning: {document['loo']['warning']}")
    finish(document, fit.diagnostics, args)
    if args.json:
        emit_json(document)
    else:
        print(summary_text(document))
        loo = document.get("loo")
        if loo and "elpd_loo" in loo:
            print(f"PSIS-LOO: elpd {loo['elpd_loo']:.1f} +- {loo['se']:.1f}, p_loo "
                  f"{loo['p_loo']:.1f}, Pareto k max {loo['pareto_k_max']:.2f} "
                  f"({loo['pareto_k_bad']} of {loo['points']} points > 0.7)")
    return strict_exit(args, fit.diagnostics)


def run_compare_models(args) -> int:
    from bayesspec.checks import compare_models

    names = [os.path.basename(p) for p in args.fits]
    if len(set(names)) != len(names):
        names = list(args.fits)
    if len(names) < 2:
        raise BadInput("give two or more fit files of the same data", argument="fits")
    fits = {name: load_fit(path) for name, path in zip(names, args.fits)}
    document = compare_models(fits)
    verdicts = [fits[name].diagnostics for name in names]
    for row in document["models"]:
        row["verdict"] = fits[row["name"]].diagnostics["status"]
    finish(document, verdicts, args, what="a fit")
    unconverged = [name for name in names if not fits[name].diagnostics["converged"]]
    if unconverged:
        document["verdict"] = (f"not decisive: {', '.join(unconverged)} did not converge, so "
                               f"its elpd is unreliable (refit it first); as computed: "
                               f"{document['verdict']}")
    if args.json:
        emit_json(document)
    else:
        print(f"{'model':<30} {'elpd_loo':>10} {'se':>7} {'diff':>8} {'dse':>7} "
              f"{'p_loo':>7} {'weight':>7}  convergence")
        for row in document["models"]:
            print(f"{row['name']:<30} {row['elpd_loo']:>10.1f} {row['se']:>7.1f} "
                  f"{row['elpd_diff']:>8.1f} {row['dse']:>7.1f} {row['p_loo']:>7.1f} "
                  f"{row['weight']:>7.2f}  {row['verdict']}"
                  + ("  (Pareto k warning)" if row["warning"] else ""))
        print(document["verdict"])
    return strict_exit(args, verdicts)
