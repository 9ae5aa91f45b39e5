"""`python -m editkit bench <what>`: benchmarks that time editkit against the reference algorithm in one run.

Each benchmark lives in a module with `add_args(parser)` and `run(args) -> dict`.
"""
import importlib

BENCHES = {
    "trace": "editkit.tracing.bench",
    "edit": "editkit.editing.bench",
}


def register(sub):
    p = sub.add_parser("bench", help="benchmarks on the embedded model")
    inner = p.add_subparsers(dest="bench", required=True)
    for name, module in BENCHES.items():
        mod = importlib.import_module(module)
        q = inner.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None)
        q.add_argument("--json", action="store_true")
        mod.add_args(q)
        q.set_defaults(func=mod.run)
