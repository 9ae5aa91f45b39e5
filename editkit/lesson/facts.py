"""The facts of a lesson: the request records `edit` and `evaluate --set` read (editkit JSON, CounterFact, EasyEdit),
each with the new targets a student may pick from.

editkit's request JSON may list extra new targets for the lesson:

    {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_true": "Paris",
     "target_new": "Rome", "lesson_targets": ["London"], "paraphrase_prompts": [...], "neighborhood_prompts": [...]}

The targets are target_new followed by lesson_targets (duplicates and the true target dropped). A lesson needs the
true target (the trace's answer, and the check that the model knows the fact); every error names the record.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.cache import digest
from ..core.errors import EditkitError
from ..core.paths import read_user_file
from . import compute

MAX_TARGETS = 4


@dataclass
class LessonFact:
    record: object  # evaluation.EvalRecord (request + relation)
    targets: list[str]  # new targets, each with one leading space
    where: str  # "facts.json, record 2 (case_id 7)": how errors name it
    row: dict = field(default_factory=dict)  # the source record, as read

    @property
    def request(self):
        return self.record.request

    @property
    def key(self) -> str:
        """Identifies the fact's computations: the request and its targets (a rerun finds its folder by it)."""
        r = self.request
        return digest(r.prompt, r.subject, r.target_true, self.targets, r.paraphrase_prompts,
                      r.neighborhood_prompts, self.record.relation)

    def slug(self) -> str:
        words = re.sub(r"[^a-z0-9]+", "-", self.request.subject.lower()).strip("-")[:40] or "fact"
        return f"{words}-{self.key[:6]}"

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "targets": self.targets, "relation": self.record.relation,
                "source": self.where}


def _targets(record, row: dict, where: str) -> list[str]:
    extra = row.get("lesson_targets", [])
    if isinstance(extra, str):
        extra = [extra]
    if not isinstance(extra, list) or not all(isinstance(t, str) for t in extra):
        raise EditkitError(f"{where}: lesson_targets must be a list of strings")
    out = []
    for t in [record.request.target_new, *extra]:
        t = " " + t.strip()
        if t.strip() and t not in out and t != record.request.target_true:
            out.append(t)
    if len(out) > MAX_TARGETS:
        raise EditkitError(f"{where}: at most {MAX_TARGETS} new targets per fact (each costs four edits)")
    return out


def _where(label: str, i: int, row) -> str:
    where = f"{label}, record {i + 1}"
    if isinstance(row, dict) and ("case_id" in row or "id" in row):
        where += f" (case_id {row.get('case_id', row.get('id'))})"
    return where


def parse_facts(text: str, label: str = "facts") -> list[LessonFact]:
    """The lesson facts of a JSON list / JSON-lines text; one clear message naming the record on any error."""
    pairs = compute.records_from_text(text, label)
    facts = []
    for i, (row, record) in enumerate(pairs):
        where = _where(label, i, row)
        if record.kind != "counterfact":
            raise EditkitError(f"{where}: a zsRE question has no true answer to trace; use editkit's JSON, "
                               "CounterFact or EasyEdit records")
        if not record.request.target_true:
            raise EditkitError(f"{where}: the true target (target_true) is missing: the lesson traces it and checks "
                               "that the model knows it")
        facts.append(LessonFact(record, _targets(record, row, where), where, row))
    if not facts:
        raise EditkitError(f"{label} holds no facts")
    return facts


def read_facts(source) -> list[LessonFact]:
    """Facts from a file path (.json / .jsonl), or from a list of record dicts (the page's teacher form)."""
    if isinstance(source, (list, tuple)):
        return parse_facts(json.dumps(list(source)), "the new fact")
    return parse_facts(read_user_file(source, "facts file"), Path(source).name)


def refusal(fact: LessonFact, check: dict) -> str:
    """The message for a fact the model does not know, with what it predicts instead."""
    r = fact.request
    top = ", ".join(f"{p['token']!r} ({p['prob']:.2f})" for p in check["predicted"][:3])
    return (f"{fact.where}: the model does not know this fact: after {r.rewrite!r} it predicts {top}, not "
            f"{r.target_true.strip()!r}. A lesson traces and edits facts the model knows; pick another fact, or "
            "the true target the model predicts")
