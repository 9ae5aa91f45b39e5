"""Several methods on the same request(s) and the same base weights: what the Edit & compare page shows.

    cmp = compare_methods(lm, ["rome", "memit"], records, hparams={"rome": {...}})
    cmp.to_frame()                      # the metrics table: before any edit, then one row per method
    cmp.figure("neighborhood")          # P(new) and P(true) per prompt, before and after each method
    cmp.methods["rome"].result.delta    # each method's weight change (to trace or keep the edited model)
    cmp.report("report.html")           # one self-contained HTML file of all of it (evaluation/html_report.py)

Every method is measured by `edit_and_measure`, exactly as the batch evaluation does. `to_json()` is the page's
JSON download: the requests, the pre-edit measurement of each record (probabilities per prompt, generations), and
per method its label, colour, time, diagnostics ("info": EditResult's), metrics per record and post-edit
measurements.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cache import Store
from ..core.errors import EditkitError
from ..core.progress import silent
from ..core.results import JsonObject, Result, frame
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_record
from ..editing.result import EditResult
from ..figures import editing as figures
from ..model import weights
from ..model.export import Exported, Provenance, export_hf
from ..model.gguf_export import export_gguf
from .datasets import as_record
from .measure import EvalSpec, edit_and_measure, measure, probabilities
from .verdict import MARGIN_MEASURE, Ranking, and_list, margins, paired

# per model: the seconds each method took per record in the last comparison, its edit and the measuring after it
# (the edit alone was 3 min of a run of 10: the estimate said the edits' time only), and MEASURE: the base model's
TIMINGS = Store("timings")
MEASURE = "measure"


@dataclass
class MethodOutcome:
    """One method's edit of every compared request: its EditResult (delta and diagnostics), per record its metrics
    (record_metrics: pre_/post_ rates and magnitudes) and its post-edit probabilities and generations."""

    label: str
    color: str
    result: EditResult
    metrics: list[dict]
    post: list[dict]  # per record: {"probabilities": group -> [{"prompt", "p_new", "p_true"?}], "generations"}

    @property
    def seconds(self) -> float:
        return self.result.seconds

    def to_json(self) -> JsonObject:
        return {"label": self.label, "color": self.color, "seconds": self.result.seconds, "info": self.result.info,
                "metrics": self.metrics, "post": self.post}


@dataclass
class Comparison(Result):
    """Methods that edited the same requests from the same weights (module docstring), in the order asked."""

    requests: list[EditRequest]
    pre: list[dict]  # per record: {"probabilities", "generations"} before any edit
    methods: dict[str, MethodOutcome]
    model: str = ""  # the model edited (lm.name)
    settings: dict = field(default_factory=dict)  # n_gen, gen_tokens, hparams (overrides per method)

    _show = "table"

    @property
    def deltas(self) -> dict:
        """method -> its weight change (empty for a comparison read from JSON)."""
        return {name: m.result.delta for name, m in self.methods.items()}

    def headline(self) -> str:
        rows = self.to_frame()
        return (f"{', '.join(m.label for m in self.methods.values())} on {len(self.requests)} request(s); "
                f"{len(rows.columns) - 2} metrics, x100")

    def to_json(self) -> JsonObject:
        return {"requests": [r.to_dict() for r in self.requests], "pre": self.pre,
                "methods": {name: m.to_json() for name, m in self.methods.items()}, "model": self.model,
                "settings": self.settings}

    @classmethod
    def _from_json(cls, d: dict) -> Comparison:
        requests = [parse_record(r) for r in d["requests"]]
        methods = {}
        for name, m in d["methods"].items():
            result = EditResult._from_json({"method": name, "requests": d["requests"], "seconds": m["seconds"],
                                            "info": m["info"], "parameters": {}})
            methods[name] = MethodOutcome(m["label"], m["color"], result, m["metrics"], m["post"])
        return cls(requests, d["pre"], methods, d.get("model", ""), d.get("settings") or {})

    def to_frame(self):
        """The metrics table (figures/editing.metrics_table): before any edit, then per method the mean of each
        metric over the records (x100), each header naming its metric's family, and the edit's time."""
        return frame(figures.metrics_table(self.to_json()))

    def diagnostics(self):
        """Per method: time, optimisation steps, how far each target was reached (figures.diagnostics_table)."""
        return frame(figures.diagnostics_table(self.to_json()))

    def figure(self, group: str = "rewrite", request: int = 0):
        """P(new) bars and P(true) crosses for each prompt of `group` ("rewrite", "paraphrase", "neighborhood")
        of one request, before and after each method (None when the request has no such prompts)."""
        return figures.probability_figure(self.to_json(), request, group)

    def norms_figure(self):
        """||dW||_F / ||W||_F of every edited matrix, per method."""
        return figures.norms_figure(self.to_json())

    def loss_figure(self):
        """The target optimisation's loss per step, per method and request."""
        return figures.loss_figure(self.to_json())

    def provenance(self, method: str) -> Provenance:
        """What an export of `method`'s edit says it is: base model, method, requests, hyperparameters."""
        return Provenance(self.model, method, [r.to_dict() for r in self.requests],
                          self.methods[method].result.info.get("hparams"))

    def export_hf(self, method: str, folder, lm) -> Exported:
        """`method`'s edited model (the base weights of `lm`, this context's edits and the method's delta) as a
        Hugging Face folder (model/export.py)."""
        with weights.applied(lm, self._delta(method)):
            return export_hf(lm, folder, self.provenance(method))

    def export_gguf(self, method: str, file, lm, type: str = "f32", overwrite: bool = False) -> Exported:
        """`method`'s edited model as one GGUF file of `type` f32, f16 or q8_0 (model/gguf_export.py); an
        existing file is replaced only with `overwrite`."""
        with weights.applied(lm, self._delta(method)):
            return export_gguf(lm, file, self.provenance(method), type, overwrite=overwrite)

    def _delta(self, method: str) -> dict:
        if method not in self.methods:
            raise EditkitError(f"{method} is not in this comparison ({', '.join(self.methods)})")
        if not self.methods[method].result.delta:
            raise EditkitError("this comparison carries no weight change (read back from JSON?)")
        return self.methods[method].result.delta

    def report(self, path, bleed=None, ripple=None, command: str | None = None, overwrite: bool = False) -> Path:
        """Write the comparison as one self-contained HTML file (evaluation/html_report.py): the requests, every
        method's metrics with 95% intervals, the charts, the conclusion, versions and the command that computes
        it again. `bleed` (a BleedMap) and `ripple` (a RippleResult) of the first request join it when given;
        an existing file is replaced only with `overwrite`."""
        from .html_report import comparison_document, write

        doc = comparison_document(self, conclusion(self).sentence(), bleed, ripple, command)
        return write(path, doc, overwrite)


def compare_methods(lm, methods: list[str], records, hparams: dict | None = None, n_gen: int = 1,
                    gen_tokens: int = 30, progress=None) -> Comparison:
    """Each method edits `records` from the same weights (`hparams` = {method: overrides}) and is measured with
    `n_gen` generations of `gen_tokens` tokens per record (module docstring)."""
    records = [as_record(r) for r in records]
    if not records:
        raise EditkitError("no request to edit")
    if not methods:
        raise EditkitError("pick at least one method")
    specs = [get(m) for m in methods]
    generation = EvalSpec(n_gen=n_gen, gen_tokens=gen_tokens)
    say = progress or silent
    say(0.0, "measuring the base model")
    start = time.perf_counter()
    pre = [measure(lm, r, n_gen, gen_tokens) for r in records]
    _remember(lm, MEASURE, (time.perf_counter() - start) / len(records))
    out = Comparison([r.request for r in records],
                     [{"probabilities": probabilities(p), "generations": p["generations"]} for p in pre], {},
                     lm.name, {"n_gen": n_gen, "gen_tokens": gen_tokens, "hparams": hparams or {}})
    for i, spec in enumerate(specs):
        def step(f, msg, i=i, spec=spec):
            say(min((i + 0.8 * f) / len(specs), 1.0), f"{spec.label}: {msg}")

        keep: dict = {}
        start = time.perf_counter()
        rows = edit_and_measure(lm, spec.name, records, (hparams or {}).get(spec.name), generation, pre=pre,
                                keep=keep, progress=step)
        post = [probabilities(r["post"]) for r in rows]
        keep["result"].check_rewrites(post)  # requests whose rewrite it does not win, and why
        out.methods[spec.name] = MethodOutcome(
            spec.label, spec.color, keep["result"], [r["metrics"] for r in rows],
            [{"probabilities": p, "generations": r["post"]["generations"]} for p, r in zip(post, rows)])
        _remember(lm, spec.name, (time.perf_counter() - start) / len(records))  # the edit and its measuring
    say(1.0, "done")
    return out


def _remember(lm, method: str, seconds: float) -> None:
    """The seconds one record's edit took, with the machine's speed for a job just after it (runtime/speed.py),
    so that an estimate under another load can scale it."""
    from ..runtime import speed

    path = TIMINGS.path(lm.name)
    TIMINGS.put(path, {**(TIMINGS.get(path) or {}), method: {"seconds": round(seconds, 2),
                                                            "rate": round(speed.rate(), 2)}})


def _timed(entry) -> tuple[float, float | None]:
    """(seconds, the rate they were measured at) of a TIMINGS entry (a bare number: written before rates were
    kept, taken as measured at the machine's best)."""
    return (entry["seconds"], entry.get("rate")) if isinstance(entry, dict) else (float(entry), None)


def estimate(lm, methods: list[str], n_records: int, hparams: dict | None = None) -> tuple[float | None, str]:
    """(seconds or None, the estimate in words) of a comparison before it starts: the first-use statistics each
    method still needs (timed by the cached statistics of this model) and each method's edits (timed by the last
    comparison on this model), each scaled to the machine's speed for a job now (runtime/speed.py: what other
    work leaves it). None where a part has never run on this model: the words say which."""
    from ..editing.defaults import load_hparams
    from ..editing.run import first_use
    from ..editing.stats import pass_seconds
    from ..runtime import speed

    passes: dict = {}
    for m in methods:
        hp = load_hparams(m, lm, (hparams or {}).get(m))
        for module, by in first_use(lm, hp, m).get("statistics", {}).items():
            for positions, layers in by.items():
                passes.setdefault((module, positions, hp.mom2_n_tokens), (set(), set()))[0].update(layers)
                passes[(module, positions, hp.mom2_n_tokens)][1].add(get(m).label)
    timed = TIMINGS.get(TIMINGS.path(lm.name)) or {}
    unknown, parts, total = [], [], 0.0
    for (module, positions, n_tokens), (layers, who) in passes.items():
        sec = pass_seconds(lm, sorted(layers), n_tokens, module, positions)
        what = f"first-use statistics of {and_list(sorted(who))} ({n_tokens:,} tokens, layers {_span(layers)})"
        if sec is None:
            unknown.append(what)
        else:
            sec = speed.now(sec)  # recorded without a rate: as measured at the machine's best
            total += sec
            parts.append(f"{what} ~{_minutes(sec)}")
    if MEASURE in timed:
        sec = n_records * speed.now(*_timed(timed[MEASURE]))
        total += sec
        parts.append(f"measuring the unedited model ~{_minutes(sec)}")
    edits = [m for m in methods if m in timed]
    if edits:
        sec = n_records * sum(speed.now(*_timed(timed[m])) for m in edits)
        total += sec
        parts.append(f"the edits of {and_list([get(m).label for m in edits])} and their measuring "
                     f"~{_minutes(sec)}")
    new = [get(m).label for m in methods if m not in timed]
    if new:
        unknown.append(f"the edit{'s' if len(new) > 1 else ''} of {and_list(new)} (timed after {lm.name}'s first "
                       "comparison on this server)")
    text = (f"About {_minutes(total)}: {'; '.join(parts)}" if parts else "No estimate yet")
    if unknown:
        text += f"{'; not counted' if parts else ''}: {'; '.join(unknown)}"
    slower = speed.slowdown()
    load = (f" At this machine's speed for a job now, {slower:.1f}x slower than at its best (other work shares "
            "its cores)" if slower >= 1.2 else " At this machine's speed for a job now") + \
        "; a wait for a turn comes on top."
    return (total if not unknown else None), text + "." + load


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{math.ceil(seconds / 60)} min"


def _span(layers) -> str:
    layers = sorted(layers)
    return f"{layers[0]}–{layers[-1]}" if len(layers) > 1 and layers[-1] - layers[0] == len(layers) - 1 else \
        ", ".join(map(str, layers))


def conclusion(comparison: Comparison) -> Ranking:
    """The methods of a comparison ranked by the summed margins on every record's prompts (rewrite, paraphrases,
    neighbours), paired prompt by prompt: its sentence says who did best and who is within noise of it. The rates
    (efficacy, specificity) often tie at 100 on one request; the margins say how far each edit went."""
    per = {}
    for m, outcome in comparison.methods.items():
        groups: dict = {}
        for post in outcome.post:
            for g, xs in margins(post["probabilities"]).items():
                groups.setdefault(g, []).extend(xs)
        per[m] = groups
    return paired(per, f"the summed margin ({MARGIN_MEASURE}, averaged over the prompts)",
                  labels={m: o.label for m, o in comparison.methods.items()})
