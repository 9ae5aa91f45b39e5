"""Ripple effects of one edit: the implied facts (data/implications.py) before and after each method, and after an
in-context reference.

    result = ripple(lm, request, ["rome", "memit"], relation="P131")     # a RippleResult
    result.figure(), result.to_frame(), result.conclusion                 # what the page and a notebook show
    result.to_json()                                                      # JSON for the CLI and the lesson pack

For every implied fact, P(expected answer) before and after, and its outcome: "moved" (a should-move fact whose
answer is now the model's top-1, every token the argmax, as greedy decoding writes it), "stayed" (a should-stay
fact still top-1) or "failed". The in-context reference (RippleEdits' in-context editor) writes the new fact
before every prompt, "Imagine that <rewrite> <new>.\n", and changes no weight: what a model that *reads* the new
fact infers, the bar a weight edit is measured against (RippleEdits and MQuAKE found it propagates far better).
Each method also reports efficacy (P(new) > P(true) on the rewrite) and specificity (P(true) > P(new) on the
record's neighbourhood prompts), from mean per-token NLLs as CounterFact scores them.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from ..core.errors import EditkitError
from ..core.progress import silent
from ..core.results import JsonObject, Result, frame
from ..data.implications import CRITERIA, Derivation, ImpliedFact, derive
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_record
from ..editing.run import run_edit
from ..model import isolation
from ..model.scoring import score_targets
from .metrics import mean_ci
from .pairs import pair_nlls
from .verdict import and_list

IN_CONTEXT = "in-context"
IN_CONTEXT_LABEL = "In-context reference"
IN_CONTEXT_COLOR = "#7f7f7f"


def context_prefix(request) -> str:
    """The in-context reference's prefix (RippleEdits' InContextModelEditor: 'Imagine that ' + the fact)."""
    return f"Imagine that {request.rewrite} {request.target_new.strip()}.\n"


@dataclass
class Outcome:
    """One implied fact after one method: P(expected), whether it is the top-1, and the verdict."""

    p_after: float
    top1: bool
    verdict: str  # "moved", "stayed" or "failed"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MethodRipple:
    name: str
    label: str
    color: str
    outcomes: list[Outcome]
    efficacy: tuple[float, float] | None = None  # (pre, post) P(new) > P(true) on the rewrite
    specificity: tuple[float, float] | None = None  # (pre, post) share of neighbourhood prompts kept
    seconds: float = 0.0
    wrote: list[dict] = field(default_factory=list)  # facts written besides the request (`written`)
    notes: list[str] = field(default_factory=list)  # the edit's diagnostics (co-edit: nothing implied)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["outcomes"] = [o.to_dict() for o in self.outcomes]
        return d


@dataclass
class RippleResult(Result):
    """One request's implied facts (its Derivation) and, per method in the order run, each fact's outcome."""

    request: EditRequest
    derivation: Derivation
    methods: list[MethodRipple] = field(default_factory=list)

    @property
    def facts(self) -> list[ImpliedFact]:
        return self.derivation.facts

    @property
    def message(self) -> str:
        """Why nothing was derived ("no implied fact the model knows: ..."); empty when facts were."""
        return self.derivation.message()

    @property
    def conclusion(self) -> str:
        """One sentence: which method propagates the edit best, within noise where it is (`conclusion`)."""
        return conclusion(self.to_json())

    def headline(self) -> str:
        return (f"{len(self.facts)} implied fact(s) of {self.request.rewrite} {self.request.target_new.strip()}"
                f", {len(self.methods)} method(s). {self.conclusion or self.message}")

    def to_json(self) -> JsonObject:
        out = {"request": self.request.to_dict(), "relation": self.derivation.relation,
               "facts": [f.to_dict() for f in self.facts],
               "dropped": [d.to_dict() for d in self.derivation.dropped],
               "message": self.derivation.message(), "criteria": CRITERIA,
               "methods": {m.name: m.to_dict() for m in self.methods}}
        out["summary"] = summary_of(out)
        out["conclusion"] = conclusion(out)
        return out

    @classmethod
    def _from_json(cls, d: dict) -> "RippleResult":
        derivation = Derivation.from_dict(d)
        methods = [MethodRipple(name, m["label"], m["color"], [Outcome(**o) for o in m["outcomes"]],
                                _tuple(m.get("efficacy")), _tuple(m.get("specificity")), m.get("seconds", 0.0),
                                m.get("wrote", []), m.get("notes", []))
                   for name, m in d["methods"].items()]
        return cls(parse_record(d["request"]), derivation, methods)

    def figure(self):
        """The grid of implied facts x (before, each method): P(expected), green where it moved / stayed as it
        should (figures/ripple.py); None when nothing was derived (`message` says why)."""
        from ..figures.ripple import ripple_figure

        return ripple_figure(self.to_json())

    def to_frame(self):
        """One row per implied fact and method: criterion, should (move/stay), prompt, answer, P before, P after,
        verdict."""
        rows = [{"criterion": f.criterion, "should": "move" if f.move else "stay", "prompt": f.prompt,
                 "answer": f.answer, "method": m.label, "p_before": f.p_before, "p_after": o.p_after,
                 "verdict": o.verdict} for m in self.methods for f, o in zip(self.facts, m.outcomes)]
        return frame(rows, ["criterion", "should", "prompt", "answer", "method", "p_before", "p_after", "verdict"])


def _tuple(pair):
    return None if pair is None else tuple(pair)


def verdict(fact: ImpliedFact, top1: bool) -> str:
    if fact.move:
        return "moved" if top1 else "failed"
    return "stayed" if top1 else "failed"


def measure_facts(lm, facts: list[ImpliedFact], prefix: str = "") -> list[Outcome]:
    """Each fact's P(expected) and top-1 at the weights this context sees, every prompt after `prefix`."""
    if not facts:
        return []
    scores = score_targets(lm, [prefix + f.prompt for f in facts], [f.answer for f in facts])
    return [Outcome(sc.prob, all(sc.token_hits), verdict(f, all(sc.token_hits))) for f, sc in zip(facts, scores)]


def counterfact_rates(lm, request, prefix: str = "") -> tuple[float | None, float | None]:
    """(efficacy, specificity) of one request: P(new) > P(true) after the rewrite; the share of neighbourhood
    prompts where P(true) > P(new) (mean per-token NLLs, CounterFact's comparison). None without target_true."""
    if not request.target_true:
        return None, None
    prompts = [request.rewrite] + list(request.neighborhood_prompts)
    nlls = pair_nlls(lm, [prefix + p for p in prompts], [request.target_new] * len(prompts),
                     [request.target_true] * len(prompts))
    eff = float(nlls[0][0] < nlls[0][1])
    neigh = [float(t < n) for n, t in nlls[1:]]
    return eff, (sum(neigh) / len(neigh) if neigh else None)


def method_ripple(lm, method: str, request, facts: list[ImpliedFact], hparams=None, pre_rates=None,
                  progress=None) -> MethodRipple:
    """Edit `request` with `method` (or the in-context reference) and measure every implied fact after it."""
    pre_rates = pre_rates or counterfact_rates(lm, request)
    if method == IN_CONTEXT:
        t0 = time.perf_counter()
        prefix = context_prefix(request)
        outcomes = measure_facts(lm, facts, prefix)
        post = counterfact_rates(lm, request, prefix)
        return MethodRipple(IN_CONTEXT, IN_CONTEXT_LABEL, IN_CONTEXT_COLOR, outcomes, _pair(pre_rates[0], post[0]),
                            _pair(pre_rates[1], post[1]), time.perf_counter() - t0)
    spec = get(method)
    result = run_edit(lm, spec.name, [request], hparams, progress=progress)
    with isolation.session(lm, result.delta):
        outcomes = measure_facts(lm, facts)
        post = counterfact_rates(lm, request)
    return MethodRipple(spec.name, spec.label, spec.color, outcomes, _pair(pre_rates[0], post[0]),
                        _pair(pre_rates[1], post[1]), result.seconds, written(result),
                        [str(d) for d in result.diagnostics])


WRITTEN = {"implied": "implied by the new fact, written to move", "kept": "the model's own answer, written to stay"}


def written(result) -> list[dict]:
    """The facts an edit wrote besides its requests, as a method reports them in its details (co-edit: the
    implications it derived, "implied", and the subject's other relations it kept, "kept"): {"prompt", "target",
    "why"}, so a user sees what a propagation method put in the batch."""
    return [{"prompt": w["prompt"], "target": w["target"], "why": why}
            for why in WRITTEN for w in result.details.get(why, [])]


def _pair(a, b):
    return None if a is None or b is None else (a, b)


def ripple(lm, request, methods: list[str], relation: str | None = None, hparams: dict | None = None,
           extra: list[ImpliedFact] = (), reference: bool = True, max_per_criterion: int = 4,
           progress=None) -> RippleResult:
    """The implied facts of `request` (derived from the model, plus `extra` ones a user adds) before and after each
    method from the same weights, and after the in-context reference (`reference`). `hparams` = {method:
    overrides}."""
    say = progress or silent
    names = [get(m).name for m in methods if m != IN_CONTEXT]
    if reference:
        names.append(IN_CONTEXT)
    if not names:
        raise EditkitError("pick at least one method or the in-context reference")
    say(0.0, "deriving the implied facts from the model's own answers")
    derivation = derive(lm, request, relation, max_per_criterion)
    if extra:
        user = list(extra)
        scores = score_targets(lm, [f.prompt for f in user], [f.answer for f in user])
        for f, sc in zip(user, scores):
            f.p_before = sc.prob
        derivation.facts += user
    out = RippleResult(request, derivation)
    if not derivation.facts:
        say(1.0, "no implied fact the model knows")
        return out
    pre = counterfact_rates(lm, request)
    for i, name in enumerate(names):
        def step(f, msg, i=i, name=name):
            say(min(0.1 + 0.9 * (i + f) / len(names), 1.0), f"{name}: {msg}")

        step(0.0, "editing and measuring")
        out.methods.append(method_ripple(lm, name, request, derivation.facts, (hparams or {}).get(name), pre, step))
    say(1.0, "done")
    return out


# ---- reading a result -----------------------------------------------------------------------------------------------

def summary_of(out: dict) -> dict:
    """Per method and criterion: {"passed", "total"} (moved or stayed as it should)."""
    table = {}
    for name, m in out["methods"].items():
        rows = {}
        for f, o in zip(out["facts"], m["outcomes"]):
            cell = rows.setdefault(f["criterion"], {"passed": 0, "total": 0})
            cell["total"] += 1
            cell["passed"] += o["verdict"] != "failed"
        table[name] = rows
    return table


def conclusion(out: dict) -> str:
    """One sentence: which method(s) propagate the edit best (most should-move facts moved, should-stay facts kept
    counted too; every method tied at the top named), and whether the next one is within noise (one fact on one
    edit)."""
    if not out["facts"]:
        return out.get("message") or "no implied fact the model knows"
    if not out["methods"]:
        return ""
    moves = [i for i, f in enumerate(out["facts"]) if f["move"]]
    stays = [i for i, f in enumerate(out["facts"]) if not f["move"]]

    def score(m):
        v = [o["verdict"] for o in m["outcomes"]]
        return sum(v[i] == "moved" for i in moves), sum(v[i] == "stayed" for i in stays)

    def counts(mv, st):  # no "0 of 0" clause
        return ", ".join(([f"{mv} of {len(moves)} facts that should move moved"] if moves else []) +
                         ([f"{st} of {len(stays)} that should stay stayed"] if stays else []))

    ranked = sorted(out["methods"].values(), key=lambda m: score(m), reverse=True)
    mv, st = score(ranked[0])
    top = [m for m in ranked if score(m) == (mv, st)]
    rest = ranked[len(top):]
    if not rest:
        both = "Both" if len(ranked) == 2 else f"All {len(ranked)}"
        return f"{both} score the same here ({counts(mv, st)}): no method propagates better on this edit."
    names = and_list([m["label"] for m in top])
    if moves:
        text = (f"{names} propagates best here" if len(top) == 1 else f"{names} tie for best here") + \
            f": {counts(mv, st)}"
    else:
        text = f"No implied fact should move here; {names} {'keeps' if len(top) == 1 else 'keep'} the most: " \
               f"{st} of {len(stays)} stayed"
    second = score(rest[0])
    if (mv + st) - sum(second) <= 1:
        said = ", ".join(([f"{second[0]} moved"] if moves else []) + ([f"{second[1]} stayed"] if stays else []))
        text += (f"; {rest[0]['label']} is within noise of {'it' if len(top) == 1 else 'them'} ({said}: one "
                 "edit's few facts cannot separate them)")
    return text + "."


# ---- many edits --------------------------------------------------------------------------------------------------

def share_table(rows_by_method: dict[str, list[dict]], facts: dict[str, list[dict]],
                against: str | None = None) -> dict:
    """Per method and criterion over edits: the mean per-edit share of facts that moved / stayed as they should,
    x100, with a 95% interval over edits, and (with `against`) the paired difference to that method."""
    def shares(rows):
        out = {}
        for row in rows:
            per = {}
            for f, o in zip(facts[row["key"]], row["outcomes"]):
                per.setdefault(f["criterion"], []).append(o["verdict"] != "failed")
            out[row["key"]] = {c: sum(v) / len(v) for c, v in per.items()}
            # the record's own rates, (before, after); a row's "specificity" is its neighbourhood prompts', kept
            # apart from the relation-specificity criterion of the same name
            for k, name in (("efficacy", "efficacy"), ("specificity", "neighbourhood")):
                if row.get(k):
                    out[row["key"]][name] = row[k][1]
                    out[row["key"]][f"{name}_change"] = row[k][1] - row[k][0]
        return out

    per = {m: shares(rows) for m, rows in rows_by_method.items()}
    table = {}
    keys = list(CRITERIA) + ["efficacy", "neighbourhood", "neighbourhood_change"]
    for m, by_edit in per.items():
        cells = {}
        for c in keys:
            vals = [v[c] for v in by_edit.values() if c in v]
            if not vals:
                continue
            mean, ci = mean_ci(vals)
            cell = {"mean": 100 * mean, "ci95": None if math.isnan(ci) else 100 * ci, "edits": len(vals)}
            if against and against in per and m != against:
                diffs = [v[c] - per[against][k][c] for k, v in by_edit.items()
                         if c in v and c in per[against].get(k, {})]
                if diffs:
                    d, dci = mean_ci(diffs)
                    cell["diff"] = {"mean": 100 * d, "ci95": None if math.isnan(dci) else 100 * dci}
            cells[c] = cell
        table[m] = cells
    return table


def ripple_view(lm, request, methods: list[str], relation: str | None = None, hparams: dict | None = None,
                extra: list[dict] = (), reference: bool = True, progress=None) -> RippleResult:
    """`ripple` for a page's work item: `extra` = [{"prompt", "answer", "move"}] rows a user typed."""
    from ..data.implications import user_fact

    facts = [user_fact(f.get("prompt", ""), f.get("answer", ""), bool(f.get("move"))) for f in extra]
    return ripple(lm, request, methods, relation, hparams, facts, reference, progress=progress)
