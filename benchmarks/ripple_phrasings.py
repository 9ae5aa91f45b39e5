"""Does the unedited model read a ripple phrasing as asking for the relation's kind of answer?

    python benchmarks/ripple_phrasings.py --model smollm2-135m                 # every rule's phrasings and probes
    python benchmarks/ripple_phrasings.py --model gemma-3-270m --speaks        # the 'speaks' candidates only
    python benchmarks/ripple_phrasings.py --model gemma-3-270m --keep          # each relation's keep candidates

For each rule (its test and edit phrasings and its more_edit_prompts) and each relation's probe, on the subjects
of counterfact-val's records of the rule's first relation (settings are chosen there, never on the evaluation
pool): the share of greedy answers that are a known answer of the asked relation (implications.match_answer).
Inverse rules are left out (their answer is the edited subject, not the relation's kind). `--speaks`: candidate
phrasings for 'languages spoken' (P1412) on counterfact-val's native-language (P103) records, with how often the
greedy answer is a language and the person's own, and the mean P(own language): how editkit chose the rule's
phrasing after '{} speaks the language of' turned out to be read as asking for a people or a place.
`--keep`: candidate second phrasings of each relation's probe (what co-edit's `max_kept` writes to keep a
subject's other relations, never the probe the test asks), on counterfact-val's records of that relation: how
often the greedy answer is of the relation's kind, and how often it is the probe's own answer.
"""
from __future__ import annotations

import argparse
import collections

import editkit
from editkit.data.implications import _complete, match_answer, relation_of, table
from editkit.evaluation.datasets import load_eval_set
from editkit.model.scoring import score_targets

SPEAKS = ["{} speaks the language of", "{} is fluent in the language of", "{} can speak the language of",
          "{} is a speaker of the language of", "{} speaks the language", "{} is fluent in", "{} speaks",
          "{} speaks fluent", "{} can speak", "{} is a speaker of", "The language {} speaks is",
          "The languages spoken by {} include", "{} writes in", "{} is able to speak", "The language spoken by {} is"]


KEEP = {
    "P17": ["{} lies in the country of", "{} can be found in the country of", "The country {} is in is"],
    "P19": ["{}'s birthplace is the city of", "{} was born in", "{} is originally from the city of"],
    "P20": ["{} passed away in the city of", "{} died in", "{}'s place of death is the city of"],
    "P27": ["{} has a citizenship of", "{} holds a citizenship from", "{}, a citizen of"],
    "P30": ["{} is a part of the continent of", "{} belongs to the continent of", "{} lies in the continent of"],
    "P36": ["The capital of {} is", "{}'s capital city is", "The capital of {} is the city of"],
    "P37": ["In {}, an official language is", "The language spoken in {} is", "In {}, the official language is"],
    "P101": ["{} works in the area of", "{}'s field of work is", "{}'s domain of work is"],
    "P103": ["The mother tongue of {} is", "{} is a native speaker of", "{}'s native language is"],
    "P106": ["{} works as a", "{}'s occupation is a", "The profession of {} is a"],
    "P108": ["{} works for", "{}'s employer is", "{} is an employee of"],
    "P127": ["The owner of {} is", "{}'s owner is", "{} belongs to"],
    "P131": ["{} can be found in", "{} lies in", "{} is situated in"],
    "P136": ["{} plays the music genre of", "{} is known for performing", "{}'s musical genre is"],
    "P140": ["{} is affiliated with the religion of", "{}'s religion is", "The religion of {} is"],
    "P159": ["{} is headquartered in the city of", "{} is headquartered in", "{}'s headquarters are in"],
    "P176": ["{} is manufactured by", "{} is made by", "{}, produced by"],
    "P178": ["{} was developed by", "{}, developed by", "{} is created by"],
    "P264": ["{} is signed to the record label", "{}'s label is", "{} records for the label"],
    "P276": ["{} can be found in", "{} is located in", "{} is situated in"],
    "P364": ["The original language of {} was", "The language of {} is", "{} was originally made in"],
    "P407": ["{} was written in", "The language of {} is", "{} is a work written in"],
    "P413": ["{} plays as a", "{}'s position is", "{} is a player in the position of"],
    "P449": ["{} was originally aired on", "{} debuted on", "{} first aired on"],
    "P463": ["{} is affiliated with the", "{} is a part of the", "{} belongs to the"],
    "P495": ["{} originated in the country of", "{} comes from the country of", "{}, that originated in"],
    "P641": ["{} is a professional player of the sport of", "{} plays the sport of", "The sport {} plays is"],
    "P740": ["{} was formed in the city of", "{} was founded in", "{} originated in the city of"],
    "P937": ["{} used to work in the city of", "{} worked in", "{} found employment in the city of"],
    "P1303": ["{} performs on the", "{} plays the", "The instrument {} plays is the"],
    "P1412": ["{} speaks fluent", "{} is a speaker of", "The languages spoken by {} include"],
}


def _subjects_by_relation() -> dict[str, list[str]]:
    """counterfact-val's subjects per relation (read from each record's template)."""
    by = collections.defaultdict(list)
    for r in load_eval_set("counterfact-val"):
        by[relation_of(r.request.prompt)].append(r.request.subject)
    return by


def keep(lm, n: int) -> None:
    by = _subjects_by_relation()
    for rel, cands in KEEP.items():
        subjects = by.get(rel, [])[:n]
        if not subjects:
            continue
        probe = table()["relations"][rel]["probe"]
        _, said = _share(lm, probe, subjects, rel)
        answers = [match_answer(said[probe.format(s)], rel) for s in subjects]
        for c in cands:
            k, got = _share(lm, c, subjects, rel)
            same = sum(a is not None and match_answer(got[c.format(s)], rel) == a
                       for s, a in zip(subjects, answers))
            print(f"keep {rel:6s} {c:48s} its kind {k:2d}/{len(subjects)}  the probe's answer {same:2d}/"
                  f"{sum(a is not None for a in answers)}", flush=True)


def _share(lm, template: str, subjects: list[str], relation: str) -> tuple[int, dict]:
    prompts = [template.format(s) for s in subjects]
    said = _complete(lm, prompts)
    return sum(match_answer(said[p], relation) is not None for p in prompts), said


def speaks(lm, n: int) -> None:
    recs = [r.request for r in load_eval_set("counterfact-val") if relation_of(r.request.prompt) == "P103"][:n]
    subjects, own_answers = [r.subject for r in recs], [r.target_true.strip() for r in recs]
    for c in SPEAKS:
        k, said = _share(lm, c, subjects, "P1412")
        prompts = [c.format(s) for s in subjects]
        own = sum((match_answer(said[p], "P1412") or "") == a for p, a in zip(prompts, own_answers))
        scores = score_targets(lm, prompts, [" " + a for a in own_answers])
        print(f"{c:40s} a language {k:2d}/{len(recs)}  the person's own {own:2d}  "
              f"mean P(own) {sum(s.prob for s in scores) / len(scores):.3f}", flush=True)


def every_rule(lm, n: int) -> None:
    by = _subjects_by_relation()
    t = table()
    for rule in t["rules"]:
        r1, r2 = rule["pair"]
        if rule["kind"] == "inverse" or not by.get(r1):
            continue
        for phrasing in rule["prompts"] + rule.get("more_edit_prompts", []):
            k, _ = _share(lm, phrasing, by[r1][:n], r2)
            print(f"{r1}>{r2:6s} {phrasing:66s} {k:2d}/{len(by[r1][:n])}", flush=True)
    for rel, d in t["relations"].items():
        if by.get(rel):
            k, _ = _share(lm, d["probe"], by[rel][:n], rel)
            print(f"probe {rel:6s} {d['probe']:58s} {k:2d}/{len(by[rel][:n])}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--n", type=int, default=None, help="subjects per rule (default 40; 60 for --speaks)")
    ap.add_argument("--speaks", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    lm = editkit.load(args.model)
    if args.speaks:
        speaks(lm, args.n or 60)
    elif args.keep:
        keep(lm, args.n or 40)
    else:
        every_rule(lm, args.n or 40)


if __name__ == "__main__":
    main()
