"""Co-editing the implications (after ChainEdit, 2025): MEMIT writes each fact together with the facts it implies.

A locate-then-edit method writes (s, r, o*) where s's last token reads it, but a fact composed from it, "s is in
the country of <country of o*>", is answered from the same subject's other memories, which the edit does not
touch (RippleEdits and MQuAKE: ROME and MEMIT pass the edited prompt and fail most implied facts). ChainEdit
edits the logical chain with the fact: derive the implied facts from rules and the model's own knowledge, and
edit them jointly. editkit's version:
1. derive each request's logical-generalization facts from the ripple rules (data/implications.py): for a rule
   (r, r2) the model's own answer z* for (o*, r2), kept only where the model knows it;
2. add each as a request of its own, phrased with the rule's second (edit) phrasing, never the test's;
3. edit the original and implied requests in one MEMIT batch (MEMIT Eq. 14-16: jointly optimized targets, the
   least-squares update spread over the critical layers).
With `joint_targets`, a request and its implications about the same subject share one target delta, optimized on
their summed losses (joint.Joint). Their keys are the same subject's last token in other prompts, nearly equal, so
separate deltas at them are averaged by Eq. 14's least squares (each fact gets about half its shift); one delta
that makes the new fact and its implications true together is written at every one of their keys instead.
Why not CaKE (circuit-aware LoRA fine-tuning on generated multi-hop data): it trains every module for 40 epochs
per edit and needs its generated reasoning data; co-editing reuses MEMIT's closed-form update and the same rules
the ripple view tests, so its gain and its cost (more requests in the batch: more weight change) are measured
against MEMIT directly.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..hparams import _non_negative, _positive
from ..joint import Joint
from ..requests import EditRequest
from ..result import Diagnostic
from ..share import update_share
from . import Method, register
from .memit import MemitHparams, apply_memit, first_use


@dataclass(frozen=True)
class CoeditHparams(MemitHparams):
    max_implied: int = 4  # implied facts written with each request (0: plain MEMIT)
    implied_phrasings: int = 1  # phrasings each implied fact is written in (the rule's edit phrasing, then its
    # more_edit_prompts; never the test's)
    joint_targets: bool = True  # a request and its implications about its subject share one target delta
    # (chosen on counterfact-val for both shipped models: docs/results/ripple.md)
    max_kept: int = 0  # the subject's other relations written with each request at the model's own answer, in
    # their `keep` phrasing (never the probe a test asks), so the shared delta must keep them (0: none)
    keep_weight: float = 1.0  # each kept relation's weight in the shared delta's loss (the fact's own: 1)
    kept_hold_stop: bool = True  # the shared delta stops only once its kept relations meet their stopping rule
    # too (False: the fact and its implications decide; a kept relation the fact pulls against may never meet it)
    joint_other: bool = False  # with joint_targets, a request's implications about another subject (an inverse
    # rule's, about o*: "Rome is the capital of" and "Rome can be found in the country of") share one delta too

    CHECKS = {**MemitHparams.CHECKS, "max_implied": _non_negative, "implied_phrasings": _positive,
              "max_kept": _non_negative, "keep_weight": _non_negative}
    NEUTRAL = {**MemitHparams.NEUTRAL, "joint_targets": False, "implied_phrasings": 1, "max_kept": 0,
               "keep_weight": 1.0, "kept_hold_stop": True, "joint_other": False}

    def recorded(self) -> dict:
        """How kept relations are written means nothing while none is: `max_kept` 0 is co-edit before they
        existed."""
        out = super().recorded()
        return {k: v for k, v in out.items() if k not in ("keep_weight", "kept_hold_stop")} if not self.max_kept \
            else out


def implied_requests(lm, requests, hp: CoeditHparams, derived: list | None = None
                     ) -> tuple[list[EditRequest], list[int]]:
    """Each request's logical-generalization facts as requests of their own (the rule's edit phrasing), and for
    each the index of the request it follows from (`derived`: the requests' derivations, if already made)."""
    from ...data.implications import edit_phrasings

    if hp.max_implied < 1:
        return [], []
    out, source = [], []
    derived = derived if derived is not None else derivations(lm, requests, hp)
    for i, (r, d) in enumerate(zip(requests, derived)):
        for f in d.facts:
            if not f.edit_prompt:
                continue
            for k, phrasing in enumerate(edit_phrasings(f, hp.implied_phrasings)):
                if f.subject in phrasing:
                    out.append(EditRequest(phrasing.replace(f.subject, "{}", 1), f.subject, f.answer,
                                           case_id=f"{r.case_id}:{f.rule}" + (f":{k}" if k else "")))
                    source.append(i)
    return out, source


def derivations(lm, requests, hp: CoeditHparams) -> list:
    """Each request's logical facts, derived from the model's own answers (data/implications.derive_many)."""
    from ...data.implications import derive_many

    return derive_many(lm, list(requests), None, hp.max_implied, criteria=("logical",))


def nothing_implied(requests, derived: list, source: list[int]) -> list[Diagnostic]:
    """A note for each request co-edit wrote no implication for: it was edited as MEMIT alone would
    edit it, and which request field would give it one (`relation`, for a template not CounterFact's)."""
    out = []
    for i, (r, d) in enumerate(zip(requests, derived)):
        if i in source:
            continue
        why = d.message() or "the implied facts it derived have no phrasing to write them in"
        hint = ("Give the request its Wikidata relation in the field `relation` (e.g. \"P131\" for 'is "
                "located in', \"P103\" for a native language; the page's relation box) so the ripple "
                "rules can derive one." if d.relation is None else
                f"Its relation {d.relation} has rules, but the model knows none of their second hops here.")
        out.append(Diagnostic("nothing_implied", f"Co-edit found no implied fact to write for {r.rewrite!r} "
                              f"({why}): it edited it as MEMIT would.", i, hint))
    return out


def kept_requests(lm, requests, hp: CoeditHparams) -> tuple[list[EditRequest], list[int]]:
    """Each request's subject's other relations as requests that keep the model's own answer (in the relations'
    `keep` phrasing), and for each the index of its request: with joint targets the delta that writes the new
    fact must also leave these answers (its loss sums theirs), and their keys are written with it."""
    from ...data.implications import keep_facts

    if hp.max_kept < 1:
        return [], []
    out, source = [], []
    for i, (r, d) in enumerate(zip(requests, keep_facts(lm, list(requests), hp.max_kept))):
        for f in d.facts:
            out.append(EditRequest(f.prompt.replace(f.subject, "{}", 1), f.subject, f.answer,
                                   case_id=f"{r.case_id}:keep:{f.rule}"))
            source.append(i)
    return out, source


def joint_tie(requests, extra, source, other: bool = False) -> tuple[int, ...] | None:
    """Which request's delta each of requests + extra shares: an implication about its request's own subject
    shares the request's; one about another subject (an inverse rule's, about o*) has its own, or with `other`
    the first one's of the same request and subject (their keys are that subject's last token, nearly equal, so
    separate deltas there would each be halved by Eq. 14's least squares, as for the request's own subject)."""
    n = len(requests)
    tie, first = list(range(n)), {}
    for e, x in enumerate(extra):
        if x.subject == requests[source[e]].subject:
            tie.append(source[e])
        else:
            tie.append(first.setdefault((source[e], x.subject), n + e) if other else n + e)
    return tuple(tie) if any(k != j for j, k in enumerate(tie)) else None


def _joint(requests, implied, kept, source, hp: CoeditHparams) -> Joint | None:
    """How requests + implied + kept share target deltas (joint.Joint): each kept relation weighted keep_weight,
    holding its delta's stop only with kept_hold_stop."""
    n = len(requests) + len(implied)
    tie = joint_tie(requests, implied + kept, source, hp.joint_other) if hp.joint_targets else None
    weights = tuple([1.0] * n + [hp.keep_weight] * len(kept)) if kept and hp.keep_weight != 1.0 else None
    holds = tuple([True] * n + [False] * len(kept)) if kept and tie and not hp.kept_hold_stop else None
    if tie is None and weights is None:
        return None
    return Joint(tie or tuple(range(n + len(kept))), weights, holds)


def apply_coedit(lm, requests, hp: CoeditHparams, progress=None, reference: bool = False,
                 solves: bool = False, state=None):
    derived = derivations(lm, requests, hp) if hp.max_implied >= 1 else []
    implied, source = implied_requests(lm, requests, hp, derived)
    notes = nothing_implied(requests, derived, source) if derived else []
    kept, kept_source = kept_requests(lm, requests, hp)
    extra, source = implied + kept, source + kept_source
    result = apply_memit(lm, list(requests) + extra, hp, progress, reference, solves,
                         joint=_joint(list(requests), implied, kept, source, hp), state=state, method="coedit")
    result.method = "coedit"
    result.details["implied"] = [{"prompt": e.rewrite, "target": e.target_new} for e in implied]
    result.details["kept"] = [{"prompt": e.rewrite, "target": e.target_new} for e in kept]
    result.diagnostics += notes
    return result


METHOD = register(Method(
    name="coedit", label="Co-edit (MEMIT + implied)", apply=apply_coedit, hparams=CoeditHparams, order=60,
    color="#a6761d", stateful=True, first_use=first_use, predict_share=update_share,
    spreading="MEMIT's spread, with each fact's derived implications edited in the same batch",
    about="After ChainEdit (2025): the implied facts derived from the model's own knowledge are edited with the "
          "fact, in one MEMIT batch."))
