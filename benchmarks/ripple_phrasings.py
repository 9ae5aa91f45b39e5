"""Does the unedited model read a ripple phrasing as asking for the relation's kind of answer?

    python benchmarks/ripple_phrasings.py --model smollm2-135m                 # every rule's phrasings and probes
    python benchmarks/ripple_phrasings.py --model gemma-3-270m --speaks        # the 'speaks' candidates only

For each rule (its test and edit phrasings and its more_edit_prompts) and each relation's probe, on the subjects
of counterfact-val's records of the rule's first relation (settings are chosen there, never on the evaluation
pool): the share of greedy answers that are a known answer of the asked relation (implications.match_answer).
Inverse rules are left out (their answer is the edited subject, not the relation's kind). `--speaks`: candidate
phrasings for 'languages spoken' (P1412) on counterfact-val's native-language (P103) records, with how often the
greedy answer is a language and the person's own, and the mean P(own language): how editkit chose the rule's
phrasing after '{} speaks the language of' turned out to be read as asking for a people or a place.
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
    by = collections.defaultdict(list)
    for r in load_eval_set("counterfact-val"):
        by[relation_of(r.request.prompt)].append(r.request.subject)
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
    args = ap.parse_args()
    lm = editkit.load(args.model)
    if args.speaks:
        speaks(lm, args.n or 60)
    else:
        every_rule(lm, args.n or 40)


if __name__ == "__main__":
    main()
