"""`python -m editkit <command>`: every capability from the shell, with --json for scripts.

Each command lives in editkit/commands/<name>.py and defines `register(subparsers)`, which adds its parser
and sets `func(args) -> dict | list` (the JSON result) and optionally `show(result)` (the human-readable form).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from .errors import EditkitError

COMMANDS = ["models", "predict", "trace", "aie", "edit", "apply-patch", "evaluate", "bench", "memories", "triggers",
            "geva", "intervene", "similarity", "spectrum", "sweep", "bleed", "layer-sweep", "lesson", "anchor",
            "hparams"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m editkit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"editkit.commands.{name.replace('-', '_')}").register(sub)
    return parser


DTYPES = ("float32", "bfloat16", "float16")


def add_model_arg(parser: argparse.ArgumentParser) -> None:
    from .models import DEFAULT_MODEL

    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"model name, hub id, folder or GGUF file ({DEFAULT_MODEL})")
    parser.add_argument("--dtype", default=None, choices=DTYPES,
                        help="dtype of the weights (float32; half precision halves the memory, the editing "
                             "algebra stays float32)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def add_ray_arg(parser: argparse.ArgumentParser) -> None:
    """--ray [ADDRESS|local:N]: fan the command's independent work out on a Ray cluster (editkit/cluster.py)."""
    parser.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS|local:N",
                        help="run on a Ray cluster: host:port of its head, local:N (start one here with N worker "
                             "CPUs), or nothing (the cluster `ray start --head` started here, or $RAY_ADDRESS)")


def ray_backend(args):
    """The cluster.Backend that --ray names (in process without it)."""
    from .cluster import parse_backend

    return parse_backend(getattr(args, "ray", None))


def load(args):
    """The model of a command's --model / --dtype / --trust-remote-code, its loading reported on stderr."""
    from .models import load_model

    def say(fraction: float, message: str) -> None:
        print(f"[editkit] {message}", file=sys.stderr, flush=True)

    return load_model(args.model, trust_remote_code=getattr(args, "trust_remote_code", False), progress=say,
                      dtype=getattr(args, "dtype", None))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except EditkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if getattr(args, "json", False) or not hasattr(args, "show"):
        print(json.dumps(result, indent=1, ensure_ascii=False))
    else:
        args.show(result)
    return 0
