"""How each kind of results manifest entry (evaluation/manifest.py) finds its files, checks them against today's
defaults and rebuilds its table.

- `ripple`: ripple-effect tables over many edits (ripple_eval.tabulate): per model the selection file and, per
  row, the method's results file named by today's hyperparameters with the row's `hparams` on top. `columns` say
  which model and measure each column shows and how (`mean`: mean ± 95% half-width; `mean+diff`: with the paired
  difference to `against` in brackets; `diff`: the difference alone; `value`: the mean alone; `edits`).
- `lifelong`: a file written by `evaluate --sequential --save`; each run's recorded hyperparameters must be today's
  defaults with the entry's `hparams[run]` on top (so a run made at an older setting says so in the manifest).
- `file`: a shipped JSON file read by a named loader (`aie`, `trace-fast`, `points`), whose recorded settings
  (`settings`) must be those the entry declares; `points` files render their table (the operating points).
"""
from __future__ import annotations

import json
from dataclasses import MISSING, fields
from functools import lru_cache
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import safe_name
from .manifest_tables import row_hparams

RIPPLE_DIR = Path("assets") / "results" / "ripple"


def _json(x) -> str:
    return json.dumps(x, sort_keys=True, default=str)


def differences(today: dict, recorded: dict) -> str:
    """The settings that differ, in words ("v_lr 2.0 today, 0.5 in the file; new_knob 1 today, absent")."""
    keys = sorted(set(today) | set(recorded), key=str)
    out = []
    for k in keys:
        if today.get(k, "absent") != recorded.get(k, "absent"):
            out.append(f"{k} {today.get(k, 'absent')} today, {recorded.get(k, 'absent')} in the file")
    return "; ".join(out)


# ---- ripple tables -------------------------------------------------------------------------------------------
def _n(e: dict, model: str) -> int:
    n = e.get("n", 100)
    return int(n[model]) if isinstance(n, dict) else int(n)


def _spec(e: dict, model: str):
    from .ripple_eval import RippleSpec

    return RippleSpec(set_name=e.get("set", "counterfact"), n=_n(e, model), against=e.get("against", "memit"))


def _models(e: dict) -> list[str]:
    return list(dict.fromkeys(c["model"] for c in e["columns"]))


def measured(row: dict, model: str) -> bool:
    """Whether a row was run on `model` (a row may name the models it was run on; default every model)."""
    return model in row.get("models", [model])


def _methods(e: dict, row: dict) -> list[str]:
    return list(dict.fromkeys([e.get("against", "memit"), row["method"]]))


@lru_cache(maxsize=256)
def _table(root: str, model: str, set_name: str, n: int, against: str, methods: tuple, hparams: str):
    from .ripple_eval import RippleSpec, tabulate

    return tabulate(model, list(methods), RippleSpec(set_name=set_name, n=n, against=against), json.loads(hparams),
                    Path(root) / RIPPLE_DIR / safe_name(model))


def forget() -> None:
    """Drop the tables read so far (the files or the registered methods may have changed since)."""
    _table.cache_clear()


def ripple_table(e: dict, root: Path, model: str, row: dict):
    """The RippleEvaluation of one row's method (and the `against` method) on one model."""
    spec = _spec(e, model)
    return _table(str(root), model, spec.set_name, spec.n, spec.against, tuple(_methods(e, row)),
                  _json(row_hparams(row, model)))


class Ripple:
    @staticmethod
    def reads(e: dict, root: Path) -> list[str]:
        from .ripple_eval import method_hparams, results_path, selection_path

        out = []
        for model in _models(e):
            spec, folder = _spec(e, model), RIPPLE_DIR / safe_name(model)
            out.append(str(selection_path(model, spec, folder)))
            for row in (r for r in e["rows"] if measured(r, model)):
                hps = method_hparams(model, _methods(e, row), row_hparams(row, model))
                out += [str(results_path(model, m, hp, spec, folder)) for m, hp in hps.items()]
        return list(dict.fromkeys(out))

    @staticmethod
    def problems(e: dict, root: Path) -> list[str]:
        out = []
        for model in _models(e):
            spec = _spec(e, model)
            for row in (r for r in e["rows"] if measured(r, model)):
                out += _missing(e, root, model, row)
                if out:
                    continue
                table = ripple_table(e, root, model, row)
                if table.n < spec.n:
                    out.append(f"the selection of {model} holds {table.n} of {spec.n} edits")
                short = {m: k for m, k in table.done.items() if k < spec.n}
                if short:
                    rows = ", ".join(f"{m} has {k} of {spec.n} rows" for m, k in short.items())
                    out.append(f"{row['label']} on {model}: {rows}")
        return list(dict.fromkeys(out))

    @staticmethod
    def render(e: dict, root: Path) -> str:
        from .manifest_tables import ripple_markdown

        return ripple_markdown(e, lambda model, row: ripple_table(e, root, model, row))

    @staticmethod
    def data(e: dict, root: Path):
        from .points import ripple_points

        return ripple_points(e, lambda model, row: ripple_table(e, root, model, row))


def _missing(e: dict, root: Path, model: str, row: dict) -> list[str]:
    """For each file of a row that today's settings do not find: the file of the same method and set with other
    settings, and which settings differ (a field added without a NEUTRAL value, a changed default)."""
    from .ripple_eval import method_hparams, method_settings, results_path, selection_path

    spec, folder = _spec(e, model), root / RIPPLE_DIR / safe_name(model)
    if not selection_path(model, spec, folder).exists():
        name = selection_path(model, spec, RIPPLE_DIR / safe_name(model))
        return [f"no selection file {name} (the rule table or the derivation changed since it was screened)"]
    out = []
    for m, hp in method_hparams(model, _methods(e, row), row_hparams(row, model)).items():
        path = results_path(model, m, hp, spec, folder)
        if path.exists():
            continue
        today = method_settings(model, m, hp, spec)["hp"] or {}
        others = sorted(folder.glob(f"ripple-{safe_name(m)}-{safe_name(model)}-{spec.set_name}-??????????.jsonl"))
        near = sorted(((differences(today, _header(p)), p) for p in others), key=lambda x: len(x[0]))
        why = f"; nearest: {near[0][1].name} ({near[0][0]})" if near else ""
        out.append(f"{row['label']} on {model}: no file {path.relative_to(root)} for {m} at today's settings{why}")
    return out


def _header(path: Path) -> dict:
    with path.open(encoding="utf-8") as f:
        first = json.loads(f.readline() or "{}")
    return (first.get("header") or {}).get("hp") or {}


# ---- lifelong runs -------------------------------------------------------------------------------------------
class Lifelong:
    @staticmethod
    def reads(e: dict, root: Path) -> list[str]:
        return [e["file"]]

    @staticmethod
    def problems(e: dict, root: Path) -> list[str]:
        """Each run at today's defaults with the entry's `hparams[run]` on top; a field the run's file predates
        must be NEUTRAL in its class (the value that means the behaviour before it) or listed in the entry's
        `predates` (the same assertion, for this file only)."""
        from ..editing.defaults import load_hparams
        from ..editing.hparams import from_dict
        from ..editing.methods import get
        from .lifelong import load_results

        path = root / e["file"]
        if not path.exists():
            return [f"{e['file']} is missing"]
        out = []
        for key, run in load_results(path).items():
            method = run.method or key
            cls = get(method).hparams
            today = load_hparams(method, run.model, e.get("hparams", {}).get(key))
            absent = set(today.to_dict()) - set(run.hparams) - {"source"}
            unexplained = sorted(absent - set(cls.NEUTRAL) - set(e.get("predates", [])))
            if unexplained:
                out.append(f"run {key!r} predates {', '.join(unexplained)} (no NEUTRAL value declared): declare "
                           "the value that means the behaviour before it, or rerun")
            # a field the file predates had its class default (the behaviour before it), not today's model value
            defaults = {f.name: f.default for f in fields(cls) if f.name in absent and f.default is not MISSING}
            filled = from_dict(cls, {**today.to_dict(), **defaults, **run.hparams}).to_dict()
            diff = differences(json.loads(_json({k: v for k, v in today.to_dict().items() if k != "source"})),
                               json.loads(_json({k: v for k, v in filled.items() if k != "source"})))
            if diff:
                out.append(f"run {key!r} was not made at today's defaults with the entry's hparams: {diff}")
        return out

    @staticmethod
    def render(e: dict, root: Path) -> str | None:
        from .lifelong import load_results
        from .manifest_tables import lifelong_markdown

        return lifelong_markdown(e, load_results(root / e["file"])) if e.get("table") else None

    @staticmethod
    def data(e: dict, root: Path):
        from .lifelong import load_results

        return load_results(root / e["file"])


# ---- single files read by a loader ---------------------------------------------------------------------------
def _load_file(e: dict, root: Path):
    path = root / e["file"]
    if not path.exists():
        raise EditkitError(f"{e['file']} is missing")
    if e["loader"] == "aie":
        from ..tracing.aie import load_run

        return load_run(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if e["loader"] == "points":
        from .points import ShippedPoints

        return ShippedPoints.from_json(data)
    if e["loader"] in ("trace-fast", "trace-preview"):  # the bench's JSON as it is
        return data
    raise EditkitError(f"unknown loader {e['loader']!r}")


class File:
    @staticmethod
    def reads(e: dict, root: Path) -> list[str]:
        return [e["file"]]

    @staticmethod
    def problems(e: dict, root: Path) -> list[str]:
        try:
            loaded = _load_file(e, root)
        except EditkitError as exc:
            return [str(exc)]
        data = loaded if isinstance(loaded, dict) else loaded.to_json()
        wrong = {k: (v, data.get(k)) for k, v in e.get("settings", {}).items() if data.get(k) != v}
        out = [f"{e['file']} was made with " + "; ".join(f"{k} {got} (the entry says {want})"
                                                         for k, (want, got) in wrong.items())] if wrong else []
        if e["loader"] == "points" and loaded.points().default() is None:
            out.append(f"today's default {loaded.knob} of {loaded.method} for {loaded.model} is not among the "
                       "measured points (a changed default needs its own point in the sweep)")
        return out

    @staticmethod
    def render(e: dict, root: Path) -> str | None:
        loaded = _load_file(e, root)
        return loaded.markdown() if hasattr(loaded, "markdown") else None

    @staticmethod
    def data(e: dict, root: Path):
        return _load_file(e, root)


class AiePeaks:
    """The AIE summary table over the shipped runs (`models`: file -> the model's label in the table)."""

    @staticmethod
    def reads(e: dict, root: Path) -> list[str]:
        return list(e["models"])

    @staticmethod
    def problems(e: dict, root: Path) -> list[str]:
        return [f"{f} is missing" for f in e["models"] if not (root / f).exists()]

    @staticmethod
    def data(e: dict, root: Path) -> dict:
        from ..tracing.aie import load_run

        return {label: load_run(root / f) for f, label in e["models"].items()}

    @staticmethod
    def render(e: dict, root: Path) -> str:
        from .manifest_tables import aie_markdown

        return aie_markdown(AiePeaks.data(e, root))


KINDS = {"ripple": Ripple, "lifelong": Lifelong, "file": File, "aie-peaks": AiePeaks}
