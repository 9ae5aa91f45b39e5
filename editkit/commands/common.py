"""What every command shares: the model arguments (--model, --dtype, --trust-remote-code, --json), --ray, and
loading the model a command names with its progress on stderr."""
from __future__ import annotations

import argparse

DTYPES = ("float32", "bfloat16", "float16")


def add_model_arg(parser: argparse.ArgumentParser) -> None:
    from ..model.shipped import DEFAULT_MODEL

    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"model name, hub id, folder or GGUF file ({DEFAULT_MODEL})")
    parser.add_argument("--dtype", default=None, choices=DTYPES,
                        help="dtype of the weights (float32; half precision halves the memory, the editing "
                             "algebra stays float32)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def add_ray_arg(parser: argparse.ArgumentParser) -> None:
    """--ray [ADDRESS|local:N]: fan the command's independent work out on a Ray cluster (editkit/runtime/cluster.py)."""
    parser.add_argument("--ray", nargs="?", const="auto", default=None, metavar="ADDRESS|local:N",
                        help="run on a Ray cluster: host:port of its head, local:N (start one here with N worker "
                             "CPUs), or nothing (the cluster `ray start --head` started here, or $RAY_ADDRESS)")


def ray_backend(args):
    """The cluster.Backend that --ray names (in process without it)."""
    from ..runtime.cluster import parse_backend

    return parse_backend(getattr(args, "ray", None))


def load(args):
    """The model of a command's --model / --dtype / --trust-remote-code, its loading reported on stderr."""
    from ..core.progress import to_stderr
    from ..model.loading import load_model

    return load_model(args.model, trust_remote_code=getattr(args, "trust_remote_code", False),
                      progress=to_stderr, dtype=getattr(args, "dtype", None))


def add_model_and_ray(parser: argparse.ArgumentParser, run, show) -> None:
    """The tail of a command that loads a model and may fan out on Ray: --model ..., --ray, and what it runs."""
    add_model_arg(parser)
    add_ray_arg(parser)
    parser.set_defaults(func=run, show=show)


def backend_and_model(args):
    """(the Ray backend of --ray, the model): --ray is parsed first, so a malformed one fails before the load."""
    backend = ray_backend(args)
    return backend, load(args)
