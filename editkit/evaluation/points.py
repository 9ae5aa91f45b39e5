"""Operating points: where a method's strength knob puts it on its trade-off, from the shipped validation sweep it
was chosen on, with today's default marked (Edit & compare shows them beside a method's result).

A knob (UltraEdit's lr, co-edit's kept-relation weight) buys one measure with another: more efficacy for fewer
neighbours kept, more implied facts moved for fewer of the subject's other facts kept. `OperatingPoints` holds the
measured points of one method on one model (x what the knob buys, y what it costs), which one today's default is,
and says in one sentence what the default buys and costs against the strongest point. Two sources:
- `ShippedPoints`: a sweep shipped as a file (assets/results/points/<method>-<model>.json; UltraEdit's Pareto sweep,
  benchmarks/ultraedit_pareto.py), which also renders the manual's table of it;
- `ripple_points`: a ripple manifest entry's rows (co-edit's settings on counterfact-val).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from .manifest_tables import md_row, row_hparams


@dataclass(frozen=True)
class Point:
    setting: dict  # the knob values (and any other setting that differs between points)
    label: str
    x: float  # what the knob buys (efficacy, logical generalization), %
    y: float  # what it costs, as what is kept (neighbours, the subject's other relations), %
    default: bool = False  # today's default for this model


@dataclass
class OperatingPoints(Result):
    """One method's measured trade-off on one model (module docstring)."""

    method: str
    model: str
    knob: str
    x_label: str
    y_label: str
    points: list[Point]
    source: str = ""  # the set and command the points were measured with
    notes: list[str] = field(default_factory=list)

    def default(self) -> Point | None:
        return next((p for p in self.points if p.default), None)

    def sentence(self) -> str:
        """What the default buys and costs, against the point of the sweep that buys the most."""
        d = self.default()
        if d is None:
            return (f"Today's default {self.knob} for {self.model} is not among the measured points; "
                    "its trade-off is unmeasured.")
        top = max(self.points, key=lambda p: (p.x, p.y))
        if top is not d and top.y >= d.y:  # the default is not on the front (a stabiliser off by default)
            return (f"Today's default ({d.label}) measured {self.x_label} {_pct(d.x)} with {self.y_label} "
                    f"{_pct(d.y)}; {top.label} measured more of both ({_pct(top.x)}, {_pct(top.y)}).")
        if top is d:
            return (f"Today's default ({d.label}) buys the highest {self.x_label} measured, {_pct(d.x)}, and "
                    f"costs {self.y_label}: {_pct(d.y)} against {_pct(max(p.y for p in self.points))} at best.")
        return (f"Today's default ({d.label}) buys {self.y_label} {_pct(d.y)} against {_pct(top.y)} at the "
                f"strongest point measured ({top.label}), and costs {self.x_label}: {_pct(d.x)} against "
                f"{_pct(top.x)}.")

    def picked(self, i: int) -> str:
        """What point i buys and costs against today's default, in one sentence."""
        p, d = self.points[i], self.default()
        if p.default or d is None:
            return self.sentence()
        return (f"{p.label}: {self.x_label} {_pct(p.x)} (the default: {_pct(d.x)}) with {self.y_label} "
                f"{_pct(p.y)} (the default: {_pct(d.y)}).")

    def ran_at(self, hparams) -> str:
        """Which measured point an edit with `hparams` (an Hparams or its dict) ran at, and the trade-off."""
        have = json.loads(json.dumps(hparams.to_dict() if hasattr(hparams, "to_dict") else dict(hparams or {})))
        match = next((p for p in self.points
                      if all(have.get(k) == v for k, v in json.loads(json.dumps(p.setting)).items())), None)
        if match is None:
            return f"It ran at a setting of {self.knob} that was not measured. {self.sentence()}"
        if match.default:
            return f"It ran at today's default. {self.sentence()}"
        return f"It ran at {match.label}, not today's default. {self.picked(self.points.index(match))}"

    def to_json(self) -> JsonObject:
        from ..editing.methods import get

        return {"method": self.method, "label": get(self.method).label, "model": self.model, "knob": self.knob,
                "x_label": self.x_label, "y_label": self.y_label, "source": self.source, "notes": self.notes,
                "points": [{"setting": p.setting, "label": p.label, "x": p.x, "y": p.y, "default": p.default}
                           for p in self.points]}

    @classmethod
    def _from_json(cls, d: dict) -> "OperatingPoints":
        return cls(d["method"], d["model"], d["knob"], d["x_label"], d["y_label"],  # "label": the method's
                   [Point(**p) for p in d["points"]], d.get("source", ""), d.get("notes", []))

    def to_frame(self):
        return frame([{"setting": p.label, self.x_label: p.x, self.y_label: p.y, "default": p.default}
                      for p in self.points])

    def figure(self, picked: int | None = None):
        from ..figures.points import points_figure

        return points_figure(self.to_json(), picked)


def _pct(v: float) -> str:
    return f"{v:.0f}%" if v == int(v) else f"{v:.1f}%"


def is_default(method: str, model: str, setting: dict) -> bool:
    """Whether `setting` is what today's defaults of `method` for `model` say, key by key."""
    from ..editing.defaults import load_hparams

    today = json.loads(json.dumps(load_hparams(method, model).to_dict()))
    return all(today.get(k) == v for k, v in json.loads(json.dumps(setting)).items())


def _layers(layers) -> str:
    ls = list(layers)
    contiguous = len(ls) > 2 and ls == list(range(ls[0], ls[-1] + 1))
    return f"{ls[0]}-{ls[-1]}" if contiguous else ",".join(map(str, ls))


def _value(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return _layers(v)
    if isinstance(v, float) and v and abs(v) < 1e-2:
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{v:.0e}")
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


MODES = {"single": ("efficacy", "generalization", "specificity", "change", "kept_correct"),
         "sequence": ("efficacy", "generalization", "specificity", "change", "kept_correct", "perplexity")}


@dataclass
class ShippedPoints(Result):
    """A shipped sweep (module docstring): per setting, each mode's rates (x100, rounded as measured), the paired
    change of specificity with its half-width and whether it keeps specificity (the interval reaches 0)."""

    method: str
    model: str
    set: str
    n: int
    knob: str
    columns: list[str]  # the setting keys, in the table's order
    unedited: dict
    rows: list[dict]
    command: str = ""
    source: str = ""
    shown: dict = field(default_factory=dict)  # what the page plots: {"mode", "y", "y_label", "about"} (default:
    # single batches, the neighbours the unedited model got right that stay right)

    def to_json(self) -> JsonObject:
        return {"method": self.method, "model": self.model, "set": self.set, "n": self.n, "knob": self.knob,
                "columns": self.columns, "unedited": self.unedited, "rows": self.rows, "command": self.command,
                "source": self.source, **({"shown": self.shown} if self.shown else {})}

    @classmethod
    def _from_json(cls, d: dict) -> "ShippedPoints":
        keys = ("method", "model", "set", "n", "knob", "columns", "unedited", "rows")
        if not isinstance(d, dict) or any(k not in d for k in keys):
            raise EditkitError(f"not a shipped sweep: it needs {', '.join(keys)}")
        return cls(*(d[k] for k in keys), d.get("command", ""), d.get("source", ""), d.get("shown", {}))

    def points(self) -> OperatingPoints:
        """Efficacy against neighbours kept, per setting, in the mode and measure `shown` names (default: single
        batches, the neighbours the unedited model got right that stay right)."""
        mode, y = self.shown.get("mode", "single"), self.shown.get("y", "kept_correct")
        pts = [Point(r["setting"], ", ".join(f"{k} {_value(r['setting'][k])}" for k in self.columns),
                     r[mode]["efficacy"], r[mode][y], is_default(self.method, self.model, r["setting"]))
               for r in self.rows]
        about = self.shown.get("about", f"{mode} batches of 10")
        return OperatingPoints(self.method, self.model, self.knob, "efficacy",
                               self.shown.get("y_label", "neighbours kept"), pts,
                               f"{self.n} {self.set} records, {about}: {self.command}",
                               [self.shown["note"]] if self.shown.get("note") else [])

    def markdown(self) -> str:
        """The manual's table: single batches left, the sequence right, today's default in bold."""
        def cells(mode: dict | None, keys) -> list[str]:
            out = []
            for k in keys:
                v = (mode or {}).get(k)
                if k == "change" and v is not None:
                    out.append(f"{v:.0f} ± {mode['change_ci']:.0f}" + (" ✓" if mode.get("keeps") else ""))
                else:
                    out.append("" if v is None else f"{v:.2f}" if k == "perplexity" else f"{v:.0f}")
            return out

        names = {"change": "change [paired]", "kept_correct": "kept correct"}
        head = self.columns + [names.get(k, k) for k in MODES["single"]]
        tail = [names.get(k, k) for k in MODES["sequence"]]
        lines = [md_row(head) + md_row(tail), "|" + "---|" * (len(head) + 1 + len(tail))]
        rows = [(["unedited"] + [""] * (len(self.columns) - 1), self.unedited, False)]
        rows += [([_value(r["setting"][k]) for k in self.columns], r, is_default(self.method, self.model, r["setting"]))
                 for r in self.rows]
        for label, r, bold in rows:
            left = label + cells(r.get("single"), MODES["single"])
            right = cells(r.get("sequence"), MODES["sequence"])
            if bold:
                left, right = [f"**{c}**" if c else c for c in left], [f"**{c}**" if c else c for c in right]
            lines.append(md_row(left) + md_row(right))
        return "\n".join(lines) + "\n"


def ripple_points(e: dict, table_of) -> dict[str, OperatingPoints]:
    """A ripple entry's `points` (method, x and y measures and their labels, knob) per model: each row of that
    method one point (its label the row's), today's default the row without `hparams`."""
    from ..editing.defaults import load_hparams

    p = e["points"]
    out = {}
    for model in dict.fromkeys(c["model"] for c in e["columns"]):
        pts = []
        for row in e["rows"]:
            if row["method"] != p["method"] or model not in row.get("models", [model]) or row.get("point") is False:
                continue
            cells = table_of(model, row).table[p["method"]]
            hp = load_hparams(p["method"], model, row_hparams(row, model).get(p["method"])).to_dict()
            setting = {k: hp[k] for k in p["keys"]}
            pts.append(Point(setting, "", cells[p["x"]]["mean"], cells[p["y"]]["mean"],
                             is_default(p["method"], model, setting)))
        # each point named by the keys that differ between this model's points
        vary = [k for k in p["keys"] if len({json.dumps(q.setting[k]) for q in pts}) > 1] or p["keys"]
        pts = [replace(q, label=", ".join(f"{k} {_value(q.setting[k])}" for k in vary)) for q in pts]
        out[model] = OperatingPoints(p["method"], model, p["knob"], p["x_label"], p["y_label"], pts,
                                     p.get("source") or e.get("command", ""))
    return out
