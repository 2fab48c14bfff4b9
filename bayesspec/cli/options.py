"""``bayesspec options``: every model option with its tier, type, default and meaning
(the declarations of :mod:`bayesspec.bayes.options`)."""

from __future__ import annotations

from bayesspec.errors import BadInput
from bayesspec.outputs import emit_json


def register(verbs) -> None:
    parser = verbs.add_parser(
        "options", help="list the model options (tier, type, default, description)")
    parser.add_argument("--model", default=None,
                        help="the options one model takes, with its defaults (default: "
                             "every option of every model)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout and nothing else there")
    parser.add_argument("--markdown", action="store_true",
                        help="print the docs/options.md page instead")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from bayesspec.bayes import MODEL_CLASSES
    from bayesspec.bayes.options import TIERS, listing, markdown

    if args.model is not None and args.model not in MODEL_CLASSES:
        raise BadInput(f"unknown model '{args.model}'; available: "
                       f"{', '.join(MODEL_CLASSES)}", option="--model")
    if args.markdown:
        if args.model is not None or args.json:
            raise BadInput("the page lists every model's options as text",
                           option="--markdown")
        print(markdown(), end="")
        return 0
    options = listing(args.model)
    if args.json:
        emit_json({"model": args.model, "tiers": TIERS, "options": options})
        return 0
    for tier, meaning in TIERS.items():
        rows = [o for o in options if o["tier"] == tier]
        if not rows:
            continue
        print(f"{tier}: {meaning}")
        for o in rows:
            default = o["default"]
            shown = ",".join(default) if isinstance(default, list) else (
                '""' if default == "" else str(default).lower() if isinstance(default, bool)
                else str(default))
            spelling = f"{o['flag']} (option {o['name']})" if "flag" in o else o["name"]
            models = "" if args.model else f" [{', '.join(o['models'])}]"
            print(f"  {spelling} = {shown}  ({o['type']}){models}")
            print(f"      {o['description']}")
        print()
    print("give one as --option NAME=VALUE (a flag where it has one); sampler settings "
          "(--draws, --tune, --chains, --target-accept) are flags of `bayesspec fit`")
    return 0
