"""`python -m editkit results check | write | prune`: the shipped results against the results manifest
(assets/results/manifest.json, editkit/evaluation/manifest.py).

    results check [NAME ...]     every entry resolves against the committed files and today's defaults, and each
                                 shown table equals its rebuild from the rows (exit 1 naming entry and command)
    results write [NAME ...]     rewrite the entries' file lists and shown tables from the rows (after a run)
    results prune [--delete]     the shipped result files no entry reads (removed with --delete)
"""
from __future__ import annotations

import sys


def register(sub):
    p = sub.add_parser("results", help="check, rebuild and prune the shipped results against the results manifest")
    p.add_argument("action", choices=("check", "write", "prune"))
    p.add_argument("names", nargs="*", help="manifest entries (check and write; default: all)")
    p.add_argument("--delete", action="store_true", help="prune: remove the files instead of listing them")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run, show=show)


def run(args):
    from ..core.errors import EditkitError
    from ..evaluation import manifest

    if args.names and args.action == "prune":
        raise EditkitError("prune takes no entry names: it lists the files no entry reads")
    if args.action == "check":
        out = manifest.check(args.names or None)
        if not out.ok:
            print(out.headline(), file=sys.stderr)
            raise SystemExit(1)
        return out
    if args.action == "write":
        return {"written": manifest.write(args.names or None)}
    return {"deleted" if args.delete else "unread": manifest.prune(args.delete)}


def show(result):
    if isinstance(result, dict) and "written" in result:
        print("\n".join(result["written"]) or "nothing changed: every entry already shows its rows")
    elif isinstance(result, dict):
        (key, files), = result.items()
        verb = "removed" if key == "deleted" else "read by no manifest entry"
        print("\n".join(files) + f"\n{len(files)} file(s) {verb}" if files else "every shipped result file is read")
    else:
        print(result.headline())
