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

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import DATA, read_user_file
from ..editing.requests import EditRequest, parse_record

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
    relation: str | None = None  # Wikidata relation id when the record has one (CounterFact's ROME schema)

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "reference_text": self.reference_text,
                "locality": [list(p) for p in self.locality], "kind": self.kind, "source": self.source,
                "relation": self.relation}


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


def _to_record(d: dict, i: int, kind: str, name: str) -> EvalRecord | None:
    """One source record as an EvalRecord (None: a zsRE record without a new answer, which is not an edit)."""
    if kind == "zsre":
        if not str(d.get("alt") or "").strip():
            return None  # no new answer: not an edit (records 534 and 723 of the shipped slice)
        request = _zsre(d, i)
        locality = [(d["loc"], _answer(d["loc_ans"]))] if d.get("loc") and d.get("loc_ans") else []
        return EvalRecord(request, None, locality, kind, f"{name}:{request.case_id}")
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
    relation = (d.get("requested_rewrite") or {}).get("relation_id") if isinstance(d.get("requested_rewrite"),
                                                                                   dict) else None
    return EvalRecord(request, reference, locality, kind, f"{name}:{request.case_id}", relation)


def _check_n(n):
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise EditkitError("the number of records must be a whole number of at least 1")


def load_eval_set(name: str, n: int | None = None) -> list[EvalRecord]:
    """The first n records of a shipped evaluation set (all if n is None), or of a user's file of CounterFact
    (ROME schema), EasyEdit or zsRE (MEND schema) records when `name` is a path (see load_eval_file)."""
    if name not in EVAL_SETS:
        if is_set_file(name):
            return load_eval_file(name, n)
        raise EditkitError(f"unknown evaluation set {name!r}; choose one of {', '.join(EVAL_SETS)}, or give a "
                           ".json / .jsonl file of records")
    _check_n(n)
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
        rec = _to_record(d, i, kind, name)
        if rec is not None:
            out.append(rec)
    return out


# --- a user's own records ----------------------------------------------------------------------------------------

def is_set_file(name) -> bool:
    """Whether `name` names a records file rather than a shipped set (a path ending in .json / .jsonl)."""
    text = str(name or "")
    return isinstance(name, Path) or text.lower().endswith((".json", ".jsonl"))


def record_kind(d: dict) -> str:
    """'zsre' for MEND's zsRE schema (src / alt / loc), else 'counterfact' (ROME or EasyEdit schema)."""
    return "zsre" if "src" in d and "alt" in d and "requested_rewrite" not in d else "counterfact"


def parse_set_text(text: str, label: str = "records", jsonl: bool | None = None) -> list[dict]:
    """The records of a JSON list (or an object with a "records" / "data" list) or of JSON lines (`jsonl`; None:
    JSON first, then JSON lines when the text has several lines); errors name the line or the top level."""
    stripped = text.lstrip("\ufeff").strip()
    if not stripped:
        raise EditkitError(f"{label} is empty")
    if not jsonl:
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            if jsonl is False or len([l for l in stripped.splitlines() if l.strip()]) < 2:
                raise EditkitError(f"{label} is not valid JSON: {exc}") from None
        else:
            if isinstance(data, dict):
                for key in ("records", "data"):
                    if isinstance(data.get(key), list):
                        return data[key]
                return [data]
            if not isinstance(data, list):
                raise EditkitError(f"{label} must hold a list of records, not {type(data).__name__}")
            return data
    rows = []
    for no, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            raise EditkitError(f"{label}, line {no}: not valid JSON ({exc})") from None
    return rows


def records_from(rows: list, label: str = "records", n: int | None = None, name: str = "file") -> list[EvalRecord]:
    """EvalRecords from parsed rows; every error names the record (its position and case_id) and the file."""
    _check_n(n)
    if not rows:
        raise EditkitError(f"{label} holds no records")
    kinds = set()
    out: list[EvalRecord] = []
    for i, d in enumerate(rows):
        if n is not None and len(out) >= n:
            break
        where = f"{label}, record {i + 1}"
        if not isinstance(d, dict):
            raise EditkitError(f"{where}: expected an object with prompt, subject and targets, got "
                               f"{type(d).__name__}")
        if "case_id" in d or "id" in d:
            where += f" (case_id {d.get('case_id', d.get('id'))})"
        kind = record_kind(d)
        kinds.add(kind)
        if len(kinds) > 1:
            raise EditkitError(f"{where}: a {kind} record in a file of "
                               f"{(kinds - {kind}).pop()} records; use one schema per file")
        try:
            if kind == "zsre" and not str(d.get("alt") or "").strip():
                raise EditkitError("the new answer 'alt' is empty")
            rec = _to_record(d, i, kind, name)
        except EditkitError as exc:
            raise EditkitError(f"{where}: {re.sub(r'^(record|request) [^:]*: ', '', str(exc))}") from None
        except (TypeError, AttributeError, KeyError, IndexError) as exc:
            raise EditkitError(f"{where}: malformed record ({type(exc).__name__}: {exc})") from None
        out.append(rec)
    return out


def load_eval_file(path, n: int | None = None) -> list[EvalRecord]:
    """The first n records of a user's .json (a list) or .jsonl (one record a line) file in CounterFact's ROME
    schema (requested_rewrite, paraphrase/neighborhood/generation/attribute prompts), EasyEdit's (prompt, subject,
    target_new, ground_truth, rephrase_prompt, locality_prompt, locality_ground_truth) or MEND's zsRE (src, alt,
    answers, rephrase, loc, loc_ans), scored like the shipped sets of that schema."""
    p = Path(path)
    label = p.name or str(path)
    text = read_user_file(path, "records file")
    rows = parse_set_text(text, label, jsonl=True if p.suffix.lower() == ".jsonl" else None)
    return records_from(rows, label, n, name=set_id(path))


def set_id(name) -> str:
    """A stable name for results files: the shipped set's name, or <file stem>-<digest of the file's bytes>."""
    if name in EVAL_SETS:
        return str(name)
    p = Path(name)
    try:
        data = p.read_bytes()
    except OSError:
        data = str(name).encode()
    return f"{p.stem}-{hashlib.sha1(data).hexdigest()[:10]}"


def save_upload(name: str, data: bytes, folder=None) -> Path:
    """Keep an uploaded records file (the app's file picker) as <stem>-<digest><suffix> in the cache and check it
    loads (errors name the record); returns its path, usable wherever a set name is."""
    from ..core.paths import cache_dir

    suffix = ".jsonl" if str(name).lower().endswith(".jsonl") else ".json"
    stem = Path(str(name)).stem or "records"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EditkitError(f"{name} is not UTF-8 text: {exc}") from None
    records_from(parse_set_text(text, str(name), jsonl=True if suffix == ".jsonl" else None), str(name))
    folder = Path(folder) if folder else cache_dir("uploads")
    path = folder / f"{''.join(c if c.isalnum() or c in '-_' else '-' for c in stem)[:60]}-" \
                    f"{hashlib.sha1(data).hexdigest()[:10]}{suffix}"
    if not path.exists():
        path.write_bytes(data)
    return path
