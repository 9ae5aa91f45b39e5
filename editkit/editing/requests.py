"""Edit requests: editkit's own JSON, CounterFact records and EasyEdit field names, validated.

editkit's schema: {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
"target_true": "French", "paraphrase_prompts": [...], "neighborhood_prompts": [...], "generation_prompts": [...]}.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import read_user_file

# What the neighbourhood prompts must be, as every page labels their input: specificity scores each of them against
# the request's true target, so a neighbour whose own answer is another one is scored against the wrong token.
NEIGHBOURS_LABEL = "Neighbour prompts (other subjects, same relation and the same true answer)"
NEIGHBOURS_HELP = ("Each neighbour is scored against the true target: P(true) should stay above P(new) after the "
                   "edit. Pick subjects whose answer is that same true target (for Paris: the Louvre, Notre-Dame); a "
                   "neighbour with another answer is scored against the wrong token.")


FIELDS = {"target_new": "the new target", "target_true": "the true target",
          "paraphrase_prompts": "the paraphrase prompts", "neighborhood_prompts": "the neighbour prompts",
          "generation_prompts": "the generation prompts"}


def _target(value, where: str, name: str) -> str | None:
    if isinstance(value, dict):
        value = value.get("str")
    if value is None:
        return None
    if isinstance(value, list):
        value = value[0] if value else ""
    if not isinstance(value, str) or not value.strip():
        raise EditkitError(f"{where}{name} is empty")
    return " " + value.strip()


def _strings(value, where: str, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EditkitError(f"{where}{name} must be a list of strings")
    return [v for v in value if v.strip()]


@dataclass
class EditRequest:
    prompt: str  # contains "{}" where the subject goes
    subject: str
    target_new: str  # with one leading space, e.g. " English"
    target_true: str | None = None
    paraphrase_prompts: list[str] = field(default_factory=list)
    neighborhood_prompts: list[str] = field(default_factory=list)
    generation_prompts: list[str] = field(default_factory=list)
    case_id: str | int | None = None
    relation: str | None = None  # the Wikidata relation ("P17") when known: what implied facts derive from

    def __post_init__(self):
        # the messages name each field as the pages label it (target_new: "the new target")
        where = f"request {self.case_id}: " if self.case_id is not None else ""
        if not isinstance(self.prompt, str) or "{}" not in self.prompt:
            raise EditkitError(f"{where}the prompt must contain '{{}}' where the subject goes: {self.prompt!r}")
        if self.prompt.count("{}") != 1:
            raise EditkitError(f"{where}the prompt must contain exactly one '{{}}'")
        if not isinstance(self.subject, str) or not self.subject.strip():
            raise EditkitError(f"{where}the subject is empty")
        self.subject = self.subject.strip()
        self.target_new = _target(self.target_new, where, FIELDS["target_new"])
        if self.target_new is None:
            raise EditkitError(f"{where}{FIELDS['target_new']} is missing")
        self.target_true = _target(self.target_true, where, FIELDS["target_true"])
        if self.target_true is not None and self.target_true == self.target_new:
            raise EditkitError(f"{where}the new target is the same as the true target ({self.target_new.strip()!r})")
        for name in ("paraphrase_prompts", "neighborhood_prompts", "generation_prompts"):
            setattr(self, name, _strings(getattr(self, name), where, FIELDS[name]))
        texts = [self.prompt, self.subject, self.target_new, self.target_true or ""]
        texts += self.paraphrase_prompts + self.neighborhood_prompts + self.generation_prompts
        if any("\x00" in t for t in texts):
            raise EditkitError(f"{where}a prompt, subject or target contains a NUL character")

    @property
    def rewrite(self) -> str:
        """The rewrite prompt with the subject filled in."""
        return self.prompt.replace("{}", self.subject)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EditRequest":
        return parse_record(d)


def parse_record(d: dict, index: int = 0) -> EditRequest:
    if not isinstance(d, dict):
        raise EditkitError(f"record {index}: expected an object, got {type(d).__name__}")
    case_id = d.get("case_id", d.get("id", index))
    where = f"record {case_id}"
    if "requested_rewrite" in d:  # CounterFact (ROME schema)
        rw = d["requested_rewrite"]
        if not isinstance(rw, dict):
            raise EditkitError(f"{where}: requested_rewrite must be an object")
        return EditRequest(
            prompt=rw.get("prompt", ""), subject=rw.get("subject", ""), target_new=rw.get("target_new"),
            target_true=rw.get("target_true"), paraphrase_prompts=d.get("paraphrase_prompts"),
            neighborhood_prompts=d.get("neighborhood_prompts"), generation_prompts=d.get("generation_prompts"),
            case_id=case_id, relation=_relation(rw.get("relation_id"), where))
    prompt = d.get("prompt", d.get("prompts", d.get("src")))
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt else ""
    subject = d.get("subject", "")
    if not isinstance(prompt, str) or not prompt.strip():
        raise EditkitError(f"{where}: the prompt is empty")
    if "{}" not in prompt:  # EasyEdit: the subject appears literally
        if not isinstance(subject, str) or not subject.strip() or subject.strip() not in prompt:
            raise EditkitError(f"{where}: the prompt has no '{{}}' and the subject {subject!r} does not occur in it")
        prompt = prompt.replace(subject.strip(), "{}", 1)
    neighborhood = d.get("neighborhood_prompts")
    if neighborhood is None:
        loc = d.get("locality_inputs") or {}
        if isinstance(loc, dict) and loc:  # EasyEdit: {"neighborhood": {"prompt": [...], "ground_truth": [...]}}
            first = next(iter(loc.values()))
            neighborhood = first.get("prompt") if isinstance(first, dict) else None
        else:
            neighborhood = d.get("locality_prompt", d.get("loc"))
    return EditRequest(
        prompt=prompt, subject=subject, target_new=d.get("target_new", d.get("alt")),
        target_true=d.get("target_true", d.get("ground_truth", d.get("pred"))),
        paraphrase_prompts=d.get("paraphrase_prompts", d.get("rephrase_prompts", d.get("rephrase_prompt",
                                                                                        d.get("rephrase")))),
        neighborhood_prompts=neighborhood, generation_prompts=d.get("generation_prompts"), case_id=case_id,
        relation=_relation(d.get("relation", d.get("relation_id")), where))


def _relation(value, where: str) -> str | None:
    """A Wikidata property id ("P17"), or None when not given."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not re.fullmatch(r"P\d+", value.strip()):
        raise EditkitError(f"{where}: the relation must be a Wikidata property id like 'P17', not {value!r}")
    return value.strip()


def parse_requests(obj) -> list[EditRequest]:
    """Requests from a path (.json / .jsonl), a dict, or a list of dicts."""
    if isinstance(obj, (str, Path)) and not (isinstance(obj, str) and obj.lstrip().startswith(("{", "["))):
        if not str(obj).strip():
            raise EditkitError("no requests given")
        path = Path(obj)
        text = read_user_file(path, "requests file")
        try:
            obj = [json.loads(l) for l in text.splitlines() if l.strip()] if path.suffix == ".jsonl" \
                else json.loads(text)
        except ValueError as exc:
            raise EditkitError(f"{path} is not valid JSON: {exc}") from None
    elif isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise EditkitError(f"requests are not valid JSON: {exc}") from None
    records = obj if isinstance(obj, list) else [obj]
    if not records:
        raise EditkitError("no requests given")
    return [r if isinstance(r, EditRequest) else parse_record(r, i) for i, r in enumerate(records)]
