"""`editkit <command>` (or `python -m editkit <command>`): every capability from the shell, with --json for scripts.

Each command lives in editkit/commands/<name>.py and defines `register(subparsers)`, which adds its parser
and sets `func(args)` (a typed result, editkit/core/results.py, or plain JSON data) and optionally `show(result)`
(the human-readable form); `--json` prints the result's `to_json()`, the JSON edge. A command file imports only
light modules at its top (no torch, transformers or the library's algorithms): every parser is built for any
command line, so `--help` answers at once; `run` imports what the command needs (tests/test_startup.py).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import warnings
from pathlib import Path

from .core.errors import CacheWarning, EditkitError
from .core.results import Result

COMMANDS = ["models", "predict", "trace", "aie", "edit", "apply-patch", "evaluate", "bench", "memories", "triggers",
            "geva", "intervene", "similarity", "spectrum", "sweep", "bleed", "layer-sweep", "lesson", "anchor",
            "hparams", "ripple", "results", "export", "report"]


def build_parser() -> argparse.ArgumentParser:
    prog = "editkit" if Path(sys.argv[0]).name == "editkit" else "python -m editkit"  # the console script or -m
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"editkit.commands.{name.replace('-', '_')}").register(sub)
    return parser


def _one_line_warnings(show):
    """editkit's own warnings as one line in the CLI's voice; anyone else's through `show`, as Python prints them."""
    def shown(message, category, *rest, **kwargs):
        if issubclass(category, CacheWarning):
            print(f"[editkit] warning: {message}", file=sys.stderr, flush=True)
        else:
            show(message, category, *rest, **kwargs)
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores showwarning afterwards (main also runs inside tests)
            warnings.showwarning = _one_line_warnings(warnings.showwarning)
            result = args.func(args)
    except EditkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if getattr(args, "json", False) or not hasattr(args, "show"):
        data = result.to_json() if isinstance(result, Result) else result
        print(json.dumps(data, indent=1, ensure_ascii=False))
    else:
        args.show(result)
    return 0


def run() -> int:
    """The console script and `python -m editkit`: `main`, then the interpreter's exit made cheap.

    At exit Python's last collections walk every object torch and transformers created at import (about a
    second of CPU after a model command); freezing them first skips that walk. Only here, at the end of a process:
    `main` also runs inside tests and the app, where objects must stay collectable.
    """
    code = main()
    sys.stdout.flush()
    gc.freeze()
    return code
