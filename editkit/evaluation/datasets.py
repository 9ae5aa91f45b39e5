"""Evaluation sets shipped in assets/data (see its PROVENANCE.md), loadable by name.

`load_eval_set(name, n)` returns `EvalRecord`s: the `EditRequest` (what run_edit needs) plus a side structure with
what only evaluation needs: reference text about the new target (consistency), locality prompts with their
answers (EasyEdit's locality, ROME's zsRE neighborhood accuracy), the metric family and the source record's id.
`requests_of(records)` gives the plain EditRequests.

Metric family (`kind`): "counterfact" sets are scored as ROME/MEMIT score CounterFact (probability comparisons of
target_new and target_true); "zsre" as ROME/MEMIT score zsRE (teacher-forced top-1 token accuracy of the new
answer on the question and its rephrase, and of the NQ answer on the unrelated `loc` question), because a zsRE
record has no true answer that competes with the new one on its unrelated question.

Consistency needs text about target_new. ROME used Wikipedia snippets (`attribute_snippets.json`), which are not
shipped (PROVENANCE.md). For records of the ROME schema, editkit's reference text is the record's own
`attribute_prompts` (prompts about other subjects whose true answer is target_new, e.g. "Australian Antarctic
Territory is located in") each completed with target_new. It is shorter and more templated than ROME's snippets,
so consistency values are not comparable with the papers' numbers. Sets without attribute prompts (EasyEdit
schema, zsRE) have no reference text: their consistency is reported as unavailable (None), never estimated.
Portability needs portability prompts, which no shipped set has: it is always unavailable here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..editing.requests import EditRequest, parse_record
from ..errors import EditkitError
from ..paths import DATA

# name -> (file under assets/data, metric family, description)
EVAL_SETS = {
    "counterfact": ("counterfact/counterfact_500.json", "counterfact",
                    "500 real CounterFact records, ROME schema (2 paraphrase, 10 neighborhood, 10 generation and "
                    "10 attribute prompts each); consistency from the attribute prompts"),
    "counterfact-first5": ("counterfact/counterfact_first5.json", "counterfact",
                           "the first 5 CounterFact records, ROME schema (case 0: Danielle Darrieux, French -> "
                           "English)"),
    "counterfact-val": ("counterfact/counterfact-val.json", "counterfact",
                        "1,919 CounterFact records in EasyEdit's schema (1 rephrase, 1 locality prompt each; no "
                        "generation prompts, so no fluency or consistency)"),
    "counterfact-edit": ("counterfact/counterfact-edit.json", "counterfact",
                         "10,000 CounterFact records in EasyEdit's schema (as counterfact-val)"),
    "zsre": ("zsre/zsre_mend_train_1k.json", "zsre",
             "998 zsRE questions in MEND's schema (src, rephrase, alt, loc, loc_ans) from a 1,000-record slice "
             "(2 records with an empty new answer are skipped); token accuracies"),
}


@dataclass
class EvalRecord:
    request: EditRequest
    reference_text: str | None = None  # text about target_new for consistency; None = unavailable
    locality: list[tuple[str, str]] = field(default_factory=list)  # (prompt, answer with leading space)
    kind: str = "counterfact"  # metric family: "counterfact" or "zsre"
    source: str = ""  # "<set>:<case_id>"

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "reference_text": self.reference_text,
                "locality": [list(p) for p in self.locality], "kind": self.kind, "source": self.source}


def _answer(a: str) -> str:
    return " " + a.strip()


def _zsre(d: dict, i: int) -> EditRequest:
    """MEND's zsRE record: the question `src` contains the subject; `answers[0]` is the true answer."""
    answers = d.get("answers") or [d.get("pred")]
    rec = {"prompt": d.get("src"), "subject": d.get("subject"), "target_new": d.get("alt"),
           "target_true": answers[0] if answers and answers[0] and answers[0].strip() != str(d.get("alt")).strip()
           else None, "rephrase_prompt": d.get("rephrase"), "case_id": d.get("case_id", i)}
    return parse_record(rec, i)


def as_record(x, kind: str = "counterfact") -> EvalRecord:
    """An EvalRecord from an EvalRecord, an EditRequest or anything parse_record accepts (no reference text)."""
    if isinstance(x, EvalRecord):
        return x
    if isinstance(x, EditRequest):
        return EvalRecord(x, kind=kind, source=str(x.case_id))
    return EvalRecord(parse_record(x), kind=kind)


def requests_of(records) -> list[EditRequest]:
    return [as_record(r).request for r in records]


def load_eval_set(name: str, n: int | None = None) -> list[EvalRecord]:
    """The first n records of a shipped evaluation set (all if n is None)."""
    if name not in EVAL_SETS:
        raise EditkitError(f"unknown evaluation set {name!r}; choose one of {', '.join(EVAL_SETS)}")
    if n is not None and (not isinstance(n, int) or n < 1):
        raise EditkitError("the number of records must be a whole number of at least 1")
    rel, kind, _ = EVAL_SETS[name]
    path = DATA / rel
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read evaluation set {name!r} at {path}: {exc}") from None
    out: list[EvalRecord] = []
    for i, d in enumerate(records):
        if n is not None and len(out) >= n:
            break
        if kind == "zsre":
            if not str(d.get("alt") or "").strip():
                continue  # no new answer: not an edit (records 534 and 723 of the shipped slice)
            request = _zsre(d, i)
            locality = [(d["loc"], _answer(d["loc_ans"]))] if d.get("loc") and d.get("loc_ans") else []
            out.append(EvalRecord(request, None, locality, kind, f"{name}:{request.case_id}"))
            continue
        request = parse_record(d, i)
        reference = None
        if d.get("attribute_prompts"):  # see the module docstring: not ROME's Wikipedia snippets
            reference = " ".join(p + request.target_new + "." for p in d["attribute_prompts"])
        if d.get("locality_prompt") and d.get("locality_ground_truth"):  # EasyEdit schema
            gt = d["locality_ground_truth"]
            locality = [(d["locality_prompt"], _answer(gt[0] if isinstance(gt, list) else gt))]
        elif request.target_true:  # ROME schema: neighborhood prompts keep their true answer
            locality = [(p, request.target_true) for p in request.neighborhood_prompts]
        else:
            locality = []
        out.append(EvalRecord(request, reference, locality, kind, f"{name}:{request.case_id}"))
    return out
