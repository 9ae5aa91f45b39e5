"""One edit measured on its own prompts before and after: what `editkit edit` prints and `editkit.edit` returns.

    report = edit_report(lm, "rome", {"prompt": "{} is in", "subject": "The Space Needle", "target_new": "Paris"})
    report.to_frame()          # per prompt: P(new) and P(true) before and after (teacher forced)
    report.figure()            # the same as bars, per prompt group
    with report.applied(lm):   # computations with the edited weights (the model itself never changes)
        ...
    report.export_hf("edited/")             # the edited model as a Hugging Face folder (model/export.py)
    report.export_gguf("edited.gguf", "q8_0")  # or as GGUF: f32, f16 or q8_0 (model/gguf_export.py)
    report.report("edit.html")              # one self-contained HTML file (evaluation/html_report.py)

Its JSON (`to_json`, `edit --json`): model, method, seconds, eval_seconds, the diagnostics `info` (EditResult's,
without its hyperparameters), per request its rewrite, targets and the probabilities before and after ("pre",
"post": group -> [{"prompt", "p_new", "p_true"}]), and the hyperparameters.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..editing.methods import get
from ..editing.requests import parse_requests
from ..editing.result import EditResult
from ..editing.run import run_edit
from ..figures.editing import before_after_figure
from ..model.export import Exported, Provenance, export_hf
from ..model.gguf_export import export_gguf
from ..model.weights import WeightDelta
from .measure import measure, probabilities

GROUPS = ("rewrite", "paraphrase", "neighborhood")


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt of a request: P(target_new) and P(target_true) after it, before and after the edit."""

    case_id: object
    group: str  # rewrite, paraphrase or neighborhood
    prompt: str
    p_new_pre: float
    p_new_post: float
    p_true_pre: float | None
    p_true_post: float | None


@dataclass
class RequestOutcome:
    """One request's prompts, each with P(target_new) and P(target_true) before and after the edit."""

    case_id: object
    rewrite: str
    target_new: str
    target_true: str | None
    pre: dict[str, list[dict]]  # group -> [{"prompt", "p_new", "p_true"?}] (measure.probabilities)
    post: dict[str, list[dict]]

    def to_json(self) -> JsonObject:
        return {"case_id": self.case_id, "rewrite": self.rewrite, "target_new": self.target_new,
                "target_true": self.target_true, "pre": self.pre, "post": self.post}

    def prompts(self) -> list[PromptOutcome]:
        """Every prompt of the request, group by group, with its probabilities before and after."""
        return [PromptOutcome(self.case_id, group, a["prompt"], a["p_new"], b["p_new"], a.get("p_true"),
                              b.get("p_true"))
                for group in GROUPS for a, b in zip(self.pre.get(group, []), self.post.get(group, []))]


@dataclass
class EditReport(Result):
    """An edit (`result`: its delta and diagnostics) and its requests' probabilities before and after."""

    model: str
    result: EditResult
    requests: list[RequestOutcome]
    eval_seconds: float = 0.0
    patch: str | None = None  # where `edit --save-patch` wrote the delta
    extra: dict = field(default_factory=dict)  # other keys of a read-back JSON, kept as they were
    lm: object = field(default=None, repr=False, compare=False)  # the model it edited (not in the JSON)

    _show = "table"

    @property
    def method(self) -> str:
        return self.result.method

    @property
    def delta(self) -> WeightDelta:
        """The weight change (parameter name -> tensor); empty for a report read from JSON."""
        return self.result.delta

    @contextmanager
    def applied(self, lm):
        """A block whose computations (in this thread) see the edited weights; the model is unchanged."""
        with self.result.applied(lm):
            yield lm

    def provenance(self) -> Provenance:
        """What an export of this edit says it is: base model, method, requests, hyperparameters."""
        return Provenance(self.model, self.method, [r.to_dict() for r in self.result.requests],
                          self.result.info.get("hparams"))

    def _exporting(self, lm):
        lm = lm if lm is not None else self.lm
        if lm is None or not self.delta:
            raise EditkitError("this report carries no model or weight change (read back from JSON?): export "
                               "from the result of editkit.edit, or use `editkit export --patch`")
        return lm

    def export_hf(self, folder, lm=None, progress=None) -> Exported:
        """The edited model (base weights + this edit, + any edits active around the call) as a Hugging
        Face folder: config, tokenizer, safetensors, editkit-edit.json. `lm`: another copy of the model."""
        lm = self._exporting(lm)
        with self.applied(lm):
            return export_hf(lm, folder, self.provenance(), say=_say(progress))

    def export_gguf(self, file, type: str = "f32", lm=None, progress=None, overwrite: bool = False) -> Exported:
        """The edited model as one GGUF file of `type` "f32" (the in-process weights exactly), "f16" or
        "q8_0" (smaller; model/gguf_export.py); an existing file is replaced only with `overwrite`."""
        lm = self._exporting(lm)
        with self.applied(lm):
            return export_gguf(lm, file, self.provenance(), type, say=_say(progress), overwrite=overwrite)

    def report(self, path, command: str | None = None, overwrite: bool = False) -> Path:
        """Write this edit as one self-contained HTML file: the requests, P(new) and P(true) before and after with
        95% intervals over the prompts, the conclusion, the weight change, versions and the command (an
        existing file is replaced only with `overwrite`)."""
        from .html_report import edit_document, write

        return write(path, edit_document(self, command), overwrite)

    def headline(self) -> str:
        parts = []
        for r in self.requests:
            a, b = r.pre["rewrite"][0], r.post["rewrite"][0]
            parts.append(f"{r.rewrite!r}: P({r.target_new.strip()}) {a['p_new']:.3f} -> {b['p_new']:.3f}")
        notes = "".join(f"\n{d}" for d in self.result.diagnostics)
        return f"{self.method} on {self.model} in {self.result.seconds:.1f} s; " + "; ".join(parts[:3]) + \
            ("; ..." if len(parts) > 3 else "") + notes

    def to_json(self) -> JsonObject:
        info = self.result.info
        hparams = info.pop("hparams", None)
        out = {"model": self.model, "method": self.method, "seconds": round(self.result.seconds, 2),
               "eval_seconds": round(self.eval_seconds, 2), "info": info,
               "requests": [r.to_json() for r in self.requests], "hparams": hparams, **self.extra}
        if self.patch is not None:
            out["patch"] = self.patch
        return out

    @classmethod
    def _from_json(cls, d: dict) -> "EditReport":
        requests = [RequestOutcome(r["case_id"], r["rewrite"], r["target_new"], r["target_true"], r["pre"],
                                   r["post"]) for r in d["requests"]]
        # the JSON keeps each request's rewrite, not its template and subject: "{}" filled with the whole rewrite
        plain = [{"prompt": "{}", "subject": r.rewrite, "target_new": r.target_new, "target_true": r.target_true,
                  "case_id": r.case_id} for r in requests]
        result = EditResult._from_json({"method": d["method"], "requests": plain, "seconds": d["seconds"],
                                        "info": {**d["info"], "hparams": d.get("hparams")}, "parameters": {}})
        known = {"model", "method", "seconds", "eval_seconds", "info", "requests", "hparams", "patch"}
        return cls(d["model"], result, requests, d["eval_seconds"], d.get("patch"),
                   {k: v for k, v in d.items() if k not in known})

    def to_frame(self):
        """One row per prompt of every request: case_id, group, prompt, P(new) and P(true) before and after."""
        return frame([asdict(p) for r in self.requests for p in r.prompts()])

    def figure(self, request: int = 0):
        """P(new) and P(true) of request `request`'s prompts before and after, one panel per prompt group."""
        return before_after_figure(self.to_json(), request)


def edit_report(lm, method: str, requests, hparams=None, progress=None) -> EditReport:
    """Edit `requests` (editkit's JSON, CounterFact or EasyEdit records, a file, or EditRequests) with `method` and
    measure each request's prompts at the weights this context sees, then with the edit applied. `hparams`
    overrides the per-model defaults (a dict) or is the method's typed Hparams."""
    get(method)  # arguments swapped read as "no requests file at 'rome'"; this names the method instead
    requests = parse_requests(requests) if not (isinstance(requests, list) and requests
                                                and all(hasattr(r, "rewrite") for r in requests)) else requests
    pre = [probabilities(measure(lm, r, n_gen=0, greedy_tokens=0)) for r in requests]
    result = run_edit(lm, method, requests, hparams, progress=progress)
    t0 = time.perf_counter()
    with result.applied(lm):
        post = [probabilities(measure(lm, r, n_gen=0, greedy_tokens=0)) for r in requests]
    result.check_rewrites(post)  # a rewrite the edit does not win is said with its likely reason
    outcomes = [RequestOutcome(r.case_id, r.rewrite, r.target_new, r.target_true, a, b)
                for r, a, b in zip(requests, pre, post)]
    return EditReport(lm.name, result, outcomes, time.perf_counter() - t0, lm=lm)


def _say(progress):
    """A message-only callback from a progress(fraction, message) (None: silent)."""
    return (lambda message: progress(0.0, message)) if progress is not None else (lambda message: None)
