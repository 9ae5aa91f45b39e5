# Over 450 lines: the relation rules as data, and the table of aliases they read.
"""What an edit should move beside what it must not: implied facts derived from the model's own knowledge.

An edit (s, r, o -> o*) has consequences beyond its own prompt (RippleEdits, Cohen et al. TACL 2024). The rules
are data (assets/data/ripple/rules.json: per CounterFact Wikidata relation a cloze, per rule its relation pair);
the answers come from the model being edited, so a test only asks what the model itself believes:
- logical generalization / compositionality ("logical", should move): (s, r, o*) and (o*, r2, z*) give a fact
  about s (the Eiffel Tower in the city Rome -> in the country Italy); z* is the model's own greedy answer to the
  rule's `hop` cloze about o*, kept only when that answer is one of the relation's known answers. 'implies'
  rules give (s, r2, o*) and 'inverse' rules a fact about o* whose answer is s.
- subject aliasing ("aliasing", should move): the edited prompt through another name of s, kept when the model
  answers it as it answers the name itself (the same entity to the model). Names: assets/data/ripple/aliases.json
  and, for people, the surname.
- relation specificity ("specificity", should stay): other relations of s (the clozes of relations whose subjects
  are of s's kind, less those the edit implies) with an answer the model knows.
- preservation / forgetfulness ("preservation", should stay): the old object's own facts (Paris is still in France).
Every candidate the model does not know is dropped with its reason (`Derivation.dropped`). A fact's answer counts
as the model's when every one of its tokens is the argmax after the prompt (teacher forced: what greedy decoding
writes) and its probability is at least MIN_P (below that it is a guess); the probability is shown beside it.
A rule's `prompts` are its test phrasing, then the phrasing a propagation method writes (`edit_prompt`); its
`more_edit_prompts` are further phrasings such a method may write too (`edit_phrasings`), never a test's, and no
derivation reads them. A relation's `keep` is a second phrasing of its probe, which a propagation method writes to
keep a subject's other relations (`keep_facts`; chosen on counterfact-val by how often the unedited models give
the probe's own answer there: benchmarks/ripple_phrasings.py --keep); no test asks it.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from ..core.errors import EditkitError
from ..core.paths import DATA
from ..model.decoding import Decoding
from ..model.scoring import score_targets

RULES_FILE = DATA / "ripple" / "rules.json"
ALIASES_FILE = DATA / "ripple" / "aliases.json"
CRITERIA = {"logical": "logical generalization / compositionality", "aliasing": "subject aliasing",
            "specificity": "relation specificity", "preservation": "preservation", "user": "your facts"}
MOVES = {"logical": True, "aliasing": True, "specificity": False, "preservation": False}
HOP_TOKENS = 4  # greedy tokens read per cloze: enough for "United States of America"
MIN_P = 0.1  # an answer the model gives with less probability than this is a guess, not knowledge


@dataclass
class ImpliedFact:
    """One test of an edit: after `prompt` the model should answer `answer` (leading space); `move`: the edit should
    bring that answer (True) or leave it (False)."""

    criterion: str  # a key of CRITERIA
    prompt: str
    answer: str
    move: bool
    rule: str = ""  # the relation pair ("P131>P17"), the alias source, the relation, or "user"
    why: str = ""  # the reasoning in words
    p_before: float | None = None  # P(answer | prompt) before the edit
    evidence: str = ""  # what the model said that the answer rests on ("Rome is located in the country of" -> Italy)
    evidence_p: float | None = None  # the probability of that answer
    edit_prompt: str = ""  # the rule's second phrasing (a propagation method writes this one, never the test's)
    subject: str = ""  # whom the prompt asks about (s, an alias, o or o*)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Dropped:
    criterion: str
    prompt: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Derivation:
    """The implied facts of one request and the candidates dropped, each with its reason."""

    relation: str | None
    facts: list[ImpliedFact] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"relation": self.relation, "facts": [f.to_dict() for f in self.facts],
                "dropped": [d.to_dict() for d in self.dropped]}

    @classmethod
    def from_dict(cls, d: dict) -> "Derivation":
        return cls(d.get("relation"), [ImpliedFact(**f) for f in d.get("facts", [])],
                   [Dropped(**x) for x in d.get("dropped", [])])

    def message(self) -> str:
        """What to tell a user when nothing was derived (empty string when something was)."""
        if self.facts:
            return ""
        if self.relation is None:
            return ("no implied fact the model knows: the request's relation is not known (its prompt template is "
                    "not one of CounterFact's single-relation templates); give the Wikidata relation")
        return f"no implied fact the model knows for this edit ({len(self.dropped)} candidate(s) dropped)"


# ---- the rule table ----------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def table() -> dict:
    try:
        return json.loads(RULES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read the ripple rules at {RULES_FILE}: {exc}") from None


@lru_cache(maxsize=1)
def aliases() -> dict[str, list[str]]:
    try:
        data = json.loads(ALIASES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read the alias table at {ALIASES_FILE}: {exc}") from None
    return {k: v for k, v in data.items() if not k.startswith("_")}


def rules_for(relation: str | None) -> list[dict]:
    return [r for r in table()["rules"] if relation and r["pair"][0] == relation]


def rule_name(rule: dict) -> str:
    return ">".join(rule["pair"])


def edit_phrasings(fact: "ImpliedFact", n: int) -> list[str]:
    """Up to `n` phrasings of a logical fact a propagation method may write: its rule's edit phrasing, then the
    rule's more_edit_prompts, each about the fact's subject."""
    more = next((r.get("more_edit_prompts", []) for r in table()["rules"] if rule_name(r) == fact.rule), [])
    return ([fact.edit_prompt] + [_fill(m, fact.subject) for m in more])[:max(n, 0)]


def _kinds(kind: str) -> set[str]:
    """A subject kind and the kinds it is one of (an athlete is a person, a country a place)."""
    return {kind, *table().get("subject_types", {}).get(kind, [])}


@lru_cache(maxsize=1)
def _records() -> list[tuple[str, str, str, str | None]]:
    """(template, relation or None, target_true, target_new) of the shipped CounterFact and known-fact records."""
    rows = []
    for f in json.loads((DATA / "known_1000.json").read_text(encoding="utf-8")):
        rows.append((f["prompt"].replace(f["subject"], "{}", 1), f["relation_id"], f["attribute"], None))
    for name in ("counterfact_500", "counterfact-edit", "counterfact-val"):
        try:
            data = json.loads((DATA / "counterfact" / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for d in data:
            rw = d.get("requested_rewrite")
            if isinstance(rw, dict):
                rows.append((rw["prompt"], rw.get("relation_id"), rw["target_true"]["str"], rw["target_new"]["str"]))
            elif d.get("subject") and d.get("subject") in str(d.get("prompt")):
                rows.append((d["prompt"].replace(d["subject"], "{}", 1), None, d["ground_truth"], d["target_new"]))
    return rows


@lru_cache(maxsize=1)
def templates() -> dict[str, frozenset]:
    """Prompt template -> the Wikidata relations of the shipped records that use it."""
    out: dict[str, set] = {}
    for template, relation, _, _ in _records():
        if relation:
            out.setdefault(template, set()).add(relation)
    return {k: frozenset(v) for k, v in out.items()}


def relation_of(prompt: str) -> str | None:
    """The relation of a prompt template when the shipped records use it for one relation only."""
    found = templates().get(prompt, frozenset())
    return next(iter(found)) if len(found) == 1 else None


@lru_cache(maxsize=None)
def vocabulary(relation: str) -> tuple[str, ...]:
    """The answers a relation can have: the shipped records' targets and the table's extra answers of that
    relation and of the relations whose answers are of the same kind (records without a relation id count through
    their template: a citizenship can be any country a record or the table names); longest first."""
    rels = table()["relations"]
    kind = rels.get(relation, {}).get("answer")
    same_kind = {r for r, d in rels.items() if kind and d.get("answer") == kind} | {relation}
    words = {w for r in same_kind for w in rels.get(r, {}).get("answers", [])}
    for template, rel, true, new in _records():
        if (rel or relation_of(template)) in same_kind:
            words.update(w.strip() for w in (true, new) if w and w.strip())
    return tuple(sorted(words, key=lambda w: (-len(w), w)))


def match_answer(continuation: str, relation: str) -> str | None:
    """The relation's answer that `continuation` starts with as whole words, as the model wrote it (" Italy, and"
    -> "Italy", " the United Kingdom." -> "the United Kingdom"), or None."""
    text = continuation.lstrip()
    article = "the " if text.startswith("the ") else ""
    for word in vocabulary(relation):
        for said in dict.fromkeys([word, article + word]):
            if text.startswith(said) and not re.match(r"\w", text[len(said):len(said) + 1]):
                return said
    return None


def same(a: str | None, b: str | None) -> bool:
    """Whether two answers name the same thing ("the United Kingdom" and "United Kingdom")."""
    def bare(x):
        return re.sub(r"^the ", "", x.strip(), flags=re.IGNORECASE)
    return a is not None and b is not None and bare(a) == bare(b)


def alias_names(subject: str, relation: str | None) -> list[tuple[str, str]]:
    """(alias, source) for a subject: the alias table's names, Mt./St. for Mount/Saint, and a person's surname."""
    out = [(a, "alias table") for a in aliases().get(subject, [])]
    for long, short in (("Mount ", "Mt. "), ("Saint ", "St. ")):  # the usual abbreviations of place names
        if subject.startswith(long):
            out.append((short + subject[len(long):], "abbreviation"))
    kind = table()["relations"].get(relation or "", {}).get("subject", "")
    words = subject.split()
    if "person" in _kinds(kind) and len(words) >= 2 and "," not in subject:
        last = words[-1]
        if len(last) > 3 and last[0].isupper() and last.isalpha():
            out.append((last, "surname"))
    return [(a, s) for a, s in dict(out).items() if a != subject] if out else []


# ---- derivation ----------------------------------------------------------------------------------------------------

def _fill(template: str, subject: str) -> str:
    return template.replace("{}", subject, 1)


def _short(text: str) -> str:
    return repr(text.strip().split("\n")[0][:30])


def _complete(lm, prompts: list[str], batch: int = 48) -> dict[str, str]:
    """Each distinct prompt's greedy continuation, in batches (one generation loop serves many prompts)."""
    unique = list(dict.fromkeys(prompts))
    said: dict[str, str] = {}
    for i in range(0, len(unique), batch):
        chunk = unique[i:i + batch]
        said.update(zip(chunk, lm.runner.complete(chunk, Decoding.greedy(HOP_TOKENS))))
    return said


def derive(lm, request, relation: str | None = None, max_per_criterion: int = 4) -> Derivation:
    """The implied facts of one request (an EditRequest) at the weights this context sees, each a prompt with the
    answer it should have after the edit, and the candidates dropped with their reasons."""
    return derive_many(lm, [request], [relation], max_per_criterion)[0]


def derive_many(lm, requests: list, relations: list | None = None, max_per_criterion: int = 4,
                progress=None, criteria: tuple[str, ...] | None = None) -> list[Derivation]:
    """`derive` for many requests, their clozes asked in shared batches. `criteria` (e.g. ("logical",), what
    co-edit writes): only those criteria's facts, without asking the clozes of the others (each criterion's facts
    are chosen apart from the others', so they are the same facts)."""
    relations = relations or [None] * len(requests)
    plans = [_plan(r, rel, criteria) for r, rel in zip(requests, relations)]
    if progress:
        progress(0.0, f"asking the model {sum(len(p[1]) for p in plans)} clozes")
    said = _complete(lm, [q for _, prompts in plans for q in prompts])
    outs, cands = [], []
    for request, (out, _) in zip(requests, plans):
        cands.append(_candidates(request, out, said, criteria) if out.relation else [])
        outs.append(out)
    if progress:
        progress(0.6, "scoring the candidate answers")
    _keep_known(lm, cands, outs, max_per_criterion)
    return outs


def _plan(request, relation: str | None, criteria=None) -> tuple[Derivation, list[str]]:
    """The derivation to fill and the clozes it asks (those of `criteria` only, when given)."""
    relation = _relation(request, relation)
    out = Derivation(relation)
    if relation is None:
        return out, []
    s, o, new = request.subject, (request.target_true or "").strip(), request.target_new.strip()
    rules = rules_for(relation)
    prompts = [request.rewrite]
    for rule in rules:
        if rule["kind"] == "compose":
            prompts += [_fill(rule["hop"], new), _fill(rule["prompts"][0], s)] + ([_fill(rule["hop"], o)] if o else [])
        else:
            prompts.append(_fill(rule["prompts"][0], new if rule["kind"] == "inverse" else s))
    if criteria is None or "aliasing" in criteria:
        prompts += [_fill(request.prompt, a) for a, _ in alias_names(s, relation)]
    if criteria is None or "specificity" in criteria:
        prompts += [p for _, p in _other_relations(relation, rules, s)]
    return out, prompts


def check_relation(relation: str) -> str:
    """A relation a user named: one of the rule table's, else a clear error that lists them (an unknown one would
    otherwise read as "the request's relation is not known", though the user gave one)."""
    known = table()["relations"]
    if relation not in known:
        raise EditkitError(f"relation {relation!r} is not in editkit's rule table; it knows "
                           f"{', '.join(sorted(known, key=lambda r: int(r[1:]) if r[1:].isdigit() else 0))}")
    return relation


def _relation(request, relation: str | None = None) -> str | None:
    """The request's relation when the table has it: the one given, else the request's own, else its template's
    ("" given = none)."""
    if relation is None:
        relation = getattr(request, "relation", None) or relation_of(request.prompt)
    return relation if relation in table()["relations"] else None


def _candidates(request, out: Derivation, said: dict, criteria=None) -> list[ImpliedFact]:
    """The candidate facts (of `criteria` only, when given) before the model's knowledge of them is checked."""
    relation, s = out.relation, request.subject
    rules = rules_for(relation)
    cands: list[ImpliedFact] = []
    for rule in rules:  # logical facts and preservation (the rules' second hop about o)
        cands += _from_rule(rule, request, said, out)
    if criteria is None or "aliasing" in criteria:
        cands += _aliasing(request, relation, alias_names(s, relation), said, out)
    if criteria is None or "specificity" in criteria:
        cands += _specificity(relation, rules, s, said, out)
    return [c for c in cands if criteria is None or c.criterion in criteria]


def _other_relations(relation: str, rules: list[dict], s: str, phrasing: str = "probe") -> list[tuple[str, str]]:
    """(relation, cloze about s) for s's other relations (those relation specificity asks) that have `phrasing`:
    the test's "probe", or the "keep" phrasing a propagation method writes."""
    rels = table()["relations"]
    return [(r, _fill(rels[r][phrasing], s)) for r in _specificity_relations(relation, rules)
            if rels[r].get(phrasing)]


def _specificity(relation: str, rules: list[dict], s: str, said: dict, out: Derivation,
                 phrasing: str = "probe") -> list[ImpliedFact]:
    cands = []
    for r, p in _other_relations(relation, rules, s, phrasing):
        label = table()["relations"][r]["label"]
        a = match_answer(said[p], r)
        if a is None:
            out.dropped.append(Dropped("specificity", p, f"the model's answer {_short(said[p])} is not a known "
                                                         f"{label}"))
            continue
        cands.append(ImpliedFact("specificity", p, " " + a, False, r, f"s's {label} does not depend on the "
                                 "edited fact", subject=s))
    return cands


def keep_facts(lm, requests: list, cap: int) -> list[Derivation]:
    """Per request, its subject's other relations (those relation specificity tests) asked in each relation's
    `keep` phrasing, never the probe a test asks, with the model's own answer there when it knows it: what co-edit
    writes beside the edit to keep them (`max_kept`), as a rule's edit phrasing is written for a logical fact."""
    outs = [Derivation(_relation(r)) for r in requests]
    if cap < 1:
        return outs
    asked = [_other_relations(out.relation, rules_for(out.relation), r.subject, "keep") if out.relation else []
             for r, out in zip(requests, outs)]
    said = _complete(lm, [p for a in asked for _, p in a])
    cands = [_specificity(out.relation, rules_for(out.relation), r.subject, said, out, "keep") if out.relation
             else [] for r, out in zip(requests, outs)]
    _keep_known(lm, cands, outs, cap)
    return outs


def synonyms(relation: str | None) -> set[str]:
    """The relation and those that ask the same thing in other words (the table's `synonyms`)."""
    out = {relation}
    for group in table().get("synonyms", []):
        if relation in group:
            out.update(group)
    return out


def kept(fact: dict, relation: str | None) -> bool:
    """False for a relation-specificity fact that asks the edited relation in other words (derivations made
    before the table had its synonym groups hold such facts: they are left out wherever facts are counted)."""
    return not (fact["criterion"] == "specificity" and fact["rule"] in synonyms(relation))


def _specificity_relations(relation: str, rules: list[dict]) -> list[str]:
    """Relations whose subjects are of s's kind (an athlete's relations include a person's, not the reverse), less
    the edited one, its synonyms and those the edit implies."""
    rels = table()["relations"]
    kinds = _kinds(rels[relation]["subject"])
    implied = {r.get("composes_to") for r in rules} | synonyms(relation)
    return [r for r, d in rels.items() if r not in implied and d["subject"] in kinds]


def _from_rule(rule: dict, request, said: dict, out: Derivation) -> list[ImpliedFact]:
    s, o, new = request.subject, (request.target_true or "").strip(), request.target_new.strip()
    name, r2 = rule_name(rule), rule["pair"][1]
    test, edit = rule["prompts"][0], rule["prompts"][1] if len(rule["prompts"]) > 1 else rule["prompts"][0]
    if rule["kind"] != "compose":
        about, answer = (new, s) if rule["kind"] == "inverse" else (s, new)
        p = _fill(test, about)
        if said[p].lstrip().startswith(answer):
            out.dropped.append(Dropped("logical", p, f"already answers {answer!r} before the edit"))
            return []
        return [ImpliedFact("logical", p, " " + answer, True, name, rule["why"], edit_prompt=_fill(edit, about),
                            subject=about)]
    facts = []
    hop_new, p = _fill(rule["hop"], new), _fill(test, s)
    z_new = match_answer(said[hop_new], r2)
    z_old = None
    if o:
        hop_old = _fill(rule["hop"], o)
        z_old = match_answer(said[hop_old], r2)
        if z_old is None:
            out.dropped.append(Dropped("preservation", hop_old, f"the model's answer {_short(said[hop_old])} is not "
                                                                f"a known {table()['relations'][r2]['label']}"))
        else:
            facts.append(ImpliedFact("preservation", hop_old, " " + z_old, False, name,
                                     f"o's own fact ({rule['why'].split(':')[0]}), untouched by the edit",
                                     subject=o))
    if z_new is None:
        out.dropped.append(Dropped("logical", p, f"the model does not know the {table()['relations'][r2]['label']} "
                                                 f"of {new}: {hop_new!r} -> {_short(said[hop_new])}"))
    elif same(z_new, z_old):
        out.dropped.append(Dropped("logical", p, f"{o} and {new} share the answer {z_new!r}: nothing should move"))
    elif same(match_answer(said[p], r2), z_new):
        out.dropped.append(Dropped("logical", p, f"already answers {z_new!r} before the edit"))
    else:
        facts.append(ImpliedFact("logical", p, " " + z_new, True, name, rule["why"], evidence=hop_new,
                                 edit_prompt=_fill(edit, s), subject=s))
    return facts


def _aliasing(request, relation: str, names: list, said: dict, out: Derivation) -> list[ImpliedFact]:
    base = match_answer(said[request.rewrite], relation)
    facts = []
    for alias, source in names:
        p = _fill(request.prompt, alias)
        if base is None:
            out.dropped.append(Dropped("aliasing", p, f"the model does not know the edited fact itself: "
                                                      f"{request.rewrite!r} -> {_short(said[request.rewrite])}"))
            continue
        got = match_answer(said[p], relation)
        if not same(got, base):
            out.dropped.append(Dropped("aliasing", p, f"not the same entity to the model: {alias!r} gives "
                                                      f"{_short(said[p])}, {request.subject!r} gives {base!r}"))
            continue
        facts.append(ImpliedFact("aliasing", p, request.target_new, True, source,
                                 f"{alias!r} names {request.subject!r} (both answer {base!r} before the edit)",
                                 subject=alias))
    return facts


def _keep_known(lm, cands: list[list[ImpliedFact]], outs: list[Derivation], cap: int) -> None:
    """Score every candidate's answer (and the evidence its answer rests on), keep those the model writes greedily,
    at most `cap` per criterion and request (the most probable), and record the rest as dropped."""
    flat = [(j, c) for j, cs in enumerate(cands) for c in cs]
    if not flat:
        return
    scores = score_targets(lm, [c.prompt for _, c in flat], [c.answer for _, c in flat])
    ev = [(i, c) for i, (_, c) in enumerate(flat) if c.evidence]
    ev_scores = score_targets(lm, [c.evidence for _, c in ev], [c.answer for _, c in ev]) if ev else []
    evidence = {i: sc for (i, _), sc in zip(ev, ev_scores)}
    kept: dict[tuple, list] = {}
    for i, ((j, c), sc) in enumerate(zip(flat, scores)):
        c.p_before = sc.prob
        out = outs[j]
        if i in evidence:
            c.evidence_p = evidence[i].prob
            if not all(evidence[i].token_hits) or c.evidence_p < MIN_P:
                out.dropped.append(Dropped(c.criterion, c.prompt, f"{c.answer.strip()!r} is not the model's top-1 "
                                                                  f"with P >= {MIN_P} after {c.evidence!r} (P = "
                                                                  f"{c.evidence_p:.2f})"))
                continue
        if not c.move and (not all(sc.token_hits) or sc.prob < MIN_P):
            out.dropped.append(Dropped(c.criterion, c.prompt, f"{c.answer.strip()!r} is not the model's top-1 "
                                                              f"with P >= {MIN_P} (P = {sc.prob:.2f})"))
            continue
        if c.move and all(sc.token_hits):
            out.dropped.append(Dropped(c.criterion, c.prompt, f"already answers {c.answer.strip()!r} before the "
                                                              "edit"))
            continue
        kept.setdefault((j, c.criterion), []).append(c)
    for (j, crit), facts in kept.items():
        facts.sort(key=lambda f: -(f.evidence_p if f.evidence_p is not None else f.p_before or 0.0))
        outs[j].facts += facts[:cap]
        outs[j].dropped += [Dropped(crit, f.prompt, f"beyond the {cap} most probable of its criterion")
                            for f in facts[cap:]]
    order = list(CRITERIA)
    for out in outs:
        out.facts.sort(key=lambda f: order.index(f.criterion))


def user_fact(prompt: str, answer: str, move: bool) -> ImpliedFact:
    """A fact a user adds by hand: after `prompt` the model should answer `answer`; `move`: because of the edit."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise EditkitError("an implied fact needs a prompt")
    if not isinstance(answer, str) or not answer.strip():
        raise EditkitError(f"the implied fact {prompt[:40]!r} needs an expected answer")
    return ImpliedFact("user", prompt.strip(), " " + answer.strip(), bool(move), "user", "added by hand")
