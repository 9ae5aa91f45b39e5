"""Evaluation sets shipped in assets/data (see its PROVENANCE.md), loadable by name.

Each record becomes an `EvalRecord`: the `EditRequest` plus what only evaluation needs: reference text about the
new target (for consistency), locality prompts with their answers and the source record's id.

Consistency needs text about target_new. ROME used Wikipedia snippets (`attribute_snippets.json`), which are not
shipped; editkit's reference text for a CounterFact record is its own `attribute_prompts` (prompts about other
subjects whose true answer is target_new) each completed with target_new. It is shorter and more templated than
ROME's snippets, so consistency values are not comparable with the papers' numbers; sets without attribute
prompts have no consistency score.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..editing.requests import EditRequest, parse_record
from ..errors import EditkitError
from ..paths import DATA

EVAL_SETS = {
    "counterfact": ("counterfact/counterfact_500.json",
                    "500 real CounterFact records, ROME schema (2 paraphrases, 10 neighborhood, 10 generation and "
                    "10 attribute prompts each)"),
    "counterfact-val": ("counterfact/counterfact-val.json",
                        "1,919 CounterFact records in EasyEdit's schema (1 rephrase, 1 locality prompt each)"),
    "counterfact-edit": ("counterfact/counterfact-edit.json",
                         "10,000 CounterFact records in EasyEdit's schema"),
    "zsre": ("zsre/zsre_mend_train_1k.json",
             "1,000 zsRE questions in MEND's schema (src, rephrase, alt, loc, loc_ans)"),
}


@dataclass
class EvalRecord:
    request: EditRequest
    reference_text: str | None = None
    locality: list[tuple[str, str]] = field(default_factory=list)  # (prompt, answer) pairs
    source: str = ""

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "reference_text": self.reference_text,
                "locality": [list(p) for p in self.locality], "source": self.source}


def _locality(d: dict) -> list[tuple[str, str]]:
    if "locality_prompt" in d and d.get("locality_ground_truth"):
        return [(d["locality_prompt"], d["locality_ground_truth"])]
    if "loc" in d and d.get("loc_ans"):
        return [(d["loc"], d["loc_ans"])]
    return []


def load_eval_set(name: str, n: int | None = None) -> list[EvalRecord]:
    """The first n records of a shipped evaluation set (all if n is None)."""
    if name not in EVAL_SETS:
        raise EditkitError(f"unknown evaluation set {name!r}; choose one of {', '.join(EVAL_SETS)}")
    if n is not None and n < 1:
        raise EditkitError("the number of records must be at least 1")
    rel, _ = EVAL_SETS[name]
    records = json.loads((DATA / rel).read_text(encoding="utf-8"))
    out = []
    for i, d in enumerate(records[:n] if n else records):
        request = parse_record(d, i)
        reference = None
        if d.get("attribute_prompts"):
            reference = " ".join(p + request.target_new + "." for p in d["attribute_prompts"])
        out.append(EvalRecord(request, reference, _locality(d), f"{name}:{request.case_id}"))
    return out
