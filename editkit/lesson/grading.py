"""Each step's question, checked against the result the pack holds (or a live result of the same form).

A grader takes the step's result and the student's answer and returns a Grade: right / close / wrong, a score in
[0, 1], feedback that states the true answer with the numbers behind it, and the answer in words (the class view
counts those). The true answers are computed from the results, never typed in: a pack of another fact or model
grades by its own numbers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from . import compute

RIGHT, CLOSE, WRONG = "right", "close", "wrong"
MOVE = 0.01  # a neighbour "moves" when P(new target) after it rises by at least one percentage point
SEVER_CHOICES = ("The later MLPs: freezing them removes much of the effect",
                 "The later attention: freezing it removes more of the effect",
                 "Neither: the effect stays when either is frozen")
SEVER_SHARE = 0.2  # below this share of the effect removed, freezing "does not matter much"
# two answers this close in the share of the effect they remove are a near tie: the other one is graded close (the
# Space Needle's 71% for the MLPs against 63% for attention graded "the later attention" wrong)
SEVER_CLOSE = 0.1
BINS = ((0.0, 0.1, "below 10%"), (0.1, 0.5, "10% to 50%"), (0.5, 0.9, "50% to 90%"), (0.9, 1.01, "above 90%"))


@dataclass
class Grade:
    verdict: str  # right | close | wrong
    score: float  # 0..1
    feedback: str
    choice: str  # the student's answer, in words
    truth: str  # the true answer, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _and(names: list[str]) -> str:
    return f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else "".join(names)


def _verdict(score: float) -> str:
    return RIGHT if score >= 0.999 else CLOSE if score >= 0.5 else WRONG


# --- step 1: logit lens --------------------------------------------------------------------------------------------
def grade_lens(lens: dict, layer: int) -> Grade:
    """Q: at which layer does the answer first become the lens's top token? Exact: right; within 2 layers: close."""
    truth = lens["first_layer"]
    answer = lens["answer"]
    if truth is None:
        return Grade(CLOSE, 0.5, f"{answer!r} never tops the lens here, not even at the last layer: the model's "
                                 "prediction is another token.", f"layer {layer}", "never")
    d = abs(int(layer) - truth)
    score = 1.0 if d == 0 else 0.5 if d <= 2 else 0.0
    where = "exactly" if d == 0 else f"{d} layer(s) {'later' if layer > truth else 'earlier'} than"
    return Grade(_verdict(score), score, f"{answer!r} first tops the logit lens at layer {truth} (of "
                 f"{len(lens['layers'])}); your layer {layer} is {where} that.", f"layer {layer}", f"layer {truth}")


# --- steps 2 and 6: which cell carries the fact ----------------------------------------------------------------------
def sites(trace: dict) -> dict:
    """The two sites of a hidden-state trace (ROME Fig. 1): the early site, the largest restored probability at any
    token before the last (in practice at the subject's tokens), and the late site at the last token (its state in
    the late layers is the output itself, so restoring it always brings the answer back)."""
    scores, last = trace["scores"], len(trace["scores"]) - 1
    early = max(((t, l) for t in range(last) for l in range(len(scores[t]))), key=lambda x: scores[x[0]][x[1]],
                default=(last, 0))
    late_l = max(range(len(scores[last])), key=scores[last].__getitem__)
    return {"early": early, "early_p": scores[early[0]][early[1]], "late": (last, late_l),
            "late_p": scores[last][late_l]}


def early_site_note(trace: dict) -> str:
    """Where this trace's early site is, against the pattern ROME found (the last subject token, early-to-middle
    layers): said plainly when the result differs from the paper's, never contradicted by the page's text."""
    (t, l), p = sites(trace)["early"], sites(trace)["early_p"]
    b, e = trace["subject_range"]
    tokens, last = trace["tokens"], e - 1
    here = f"{tokens[t]!r} at layer {l} (p = {p:.3f})"
    if t == last:
        return f"Here, as in ROME, the strongest state before the last token is the last subject token: {here}."
    best_last = max(trace["scores"][last])
    if b <= t < last:
        return (f"Here the result differs from ROME's pattern: the strongest state is {here}, an earlier token of the "
                f"subject, not its last token {tokens[last]!r}, whose best state brings back p = {best_last:.3f}.")
    return (f"Here the result differs from ROME's pattern: the strongest state before the last token is {here}, "
            f"outside the subject (its last token {tokens[last]!r} brings back at most p = {best_last:.3f}).")


def trace_summary(trace: dict) -> str:
    """A trace in two sentences: the answer's probability in the clean and the corrupted run, then where restoring
    one state brings it back most (early_site_note). What a student's own trace ends with, as the pack's does."""
    return (f"Clean run: p({trace['answer']!r}) = {trace['high_score']:.3f}; with noise on the subject's "
            f"embeddings (corrupted): {trace['low_score']:.3f}. {early_site_note(trace)}")


def grade_cell(trace: dict, token: int, layer: int) -> Grade:
    """Q: which (token, layer) state carries the fact? Graded by the distance to the early site, |dt| + |dl| / 2:
    the same token within 2 layers is right, a distance up to 3 close. The last token's late states carry the
    answer too (they are the output): close, with that said."""
    s = sites(trace)
    tokens = trace["tokens"]
    (pt, pl), p = s["early"], s["early_p"]
    d = abs(token - pt) + abs(layer - pl) / 2
    score = 1.0 if token == pt and abs(layer - pl) <= 2 else max(0.0, 1 - d / 6) if d <= 3 else 0.0
    score = 1.0 if score >= 0.999 else min(score, 0.9)
    last = len(tokens) - 1
    choice = f"{tokens[token]!r} (token {token}), layer {layer}"
    truth = f"{tokens[pt]!r} (token {pt}), layer {pl}"
    text = (f"The strongest state before the last token is {truth}: restoring it alone brings "
            f"p({trace['answer']!r}) from {trace['low_score']:.3f} (corrupted) back to {p:.3f} (clean "
            f"{trace['high_score']:.3f}). Your cell is {d:g} away (tokens + layers / 2).")
    if token == last and layer >= s["late"][1] - 2:
        score = max(score, 0.5)
        text += (" Your cell is the late site: the last token's state in late layers is the output itself, so it "
                 "always restores the answer; the question is where the fact is first recalled.")
    return Grade(_verdict(score), round(score, 3), text, choice, truth)


# --- step 3: severing ---------------------------------------------------------------------------------------------
def severing_drops(sev: dict) -> dict:
    """The share of the restored effect that freezing the later MLPs / attention removes, over the first half of
    the layers: sum_l max(none_l - frozen_l, 0) / sum_l max(none_l - low, 0) (ROME Fig. 4's gap)."""
    half = max(1, len(sev["layers"]) // 2)
    low = sev["low_score"]
    base = sum(max(x - low, 0.0) for x in sev["none"][:half])
    out = {}
    for kind in ("mlp", "attn"):
        gap = sum(max(n - f, 0.0) for n, f in zip(sev["none"][:half], sev[kind][:half]))
        out[kind] = gap / base if base > 1e-9 else 0.0
    return out


def severing_truth(sev: dict) -> int:
    d = severing_drops(sev)
    if max(d.values()) < SEVER_SHARE:
        return 2
    return 0 if d["mlp"] >= d["attn"] else 1


def severing_conclusion(sev: dict) -> str:
    """The severing result in one sentence: which frozen module removes more of the restored effect (a near tie
    said as one)."""
    d = severing_drops(sev)
    truth = severing_truth(sev)
    tie = truth != 2 and abs(d["mlp"] - d["attn"]) < SEVER_CLOSE
    which = {0: "the later MLPs do more of the work", 1: "the later attention does more of the work",
             2: f"neither matters much (both under {100 * SEVER_SHARE:.0f}%)"}[truth]
    if tie:
        which = which.replace("do more", "do a little more").replace("does more", "does a little more") + (
            f", a near tie (within {100 * SEVER_CLOSE:.0f} points of each other)")
    return (f"Over the first {max(1, len(sev['layers']) // 2)} layers, freezing the later MLPs at "
            f"{sev['token_str']!r} removes {100 * d['mlp']:.0f}% of the restored effect, freezing the later "
            f"attention {100 * d['attn']:.0f}%: {which}.")


def _near_severing(d: dict, choice: int, truth: int) -> bool:
    """Whether `choice` is within SEVER_CLOSE of the truth: the other module of a near tie, or "neither" against a
    module (or a module against "neither") whose share is near the SEVER_SHARE line."""
    if {choice, truth} == {0, 1}:
        return abs(d["mlp"] - d["attn"]) < SEVER_CLOSE
    module = choice if truth == 2 else truth
    if 2 not in (choice, truth) or module not in (0, 1):
        return False
    share = d["mlp" if module == 0 else "attn"]
    return truth == 2 and share >= SEVER_SHARE - SEVER_CLOSE / 2 or \
        truth != 2 and max(d.values()) < SEVER_SHARE + SEVER_CLOSE / 2


def grade_severing(sev: dict, choice: int) -> Grade:
    """Q: do the later MLPs do the work? Three choices (SEVER_CHOICES); the truth from the severing curves; the
    other side of a near tie (_near_severing) is close."""
    truth = severing_truth(sev)
    score = 1.0 if choice == truth else 0.5 if _near_severing(severing_drops(sev), choice, truth) else 0.0
    text = severing_conclusion(sev)
    if score == 0.5 and truth != 2 and choice != 2:
        text += " So your answer is close: the two are nearly tied."
    elif score == 0.5:
        text += f" So your answer is close: the share is near the {100 * SEVER_SHARE:.0f}% line."
    return Grade(_verdict(score), score, text, SEVER_CHOICES[choice].split(":")[0],
                 SEVER_CHOICES[truth].split(":")[0])


# --- step 4: memories -----------------------------------------------------------------------------------------------
def memory_hits(view: dict) -> list[str]:
    """Labels of the shown memories whose value's top tokens include the answer token."""
    return [m["label"] for m in view["memories"]
            if any(t["token_id"] == view["answer_id"] for t in m["value_tokens"])]


def grade_memories(view: dict, says_answer: bool) -> Grade:
    """Q: will one of the top memories' values promote the answer among its top tokens? yes / no."""
    hits = memory_hits(view)
    truth = bool(hits)
    score = 1.0 if says_answer == truth else 0.0
    n = len(view["memories"])
    text = (f"{'Yes' if truth else 'No'}: {'the value of ' + ', '.join(hits) if hits else 'none of the ' + str(n)} "
            f"{'promotes' if hits else 'top memories promotes'} {view['answer']!r} among its top "
            f"{len(view['memories'][0]['value_tokens']) if n else 0} tokens. {view['n_active']} of {view['d_ff']} "
            f"memories have m_i > 0 at this token.")
    return Grade(_verdict(score), score, text, "yes" if says_answer else "no", "yes" if truth else "no")


# --- step 5: the edit's probability ---------------------------------------------------------------------------------
def bin_of(p: float) -> int:
    return next(i for i, (lo, hi, _) in enumerate(BINS) if lo <= p < hi)


def grade_edit(edit: dict, choice: int) -> Grade:
    """Q: after the edit, what will P(new target) be on the prompt? Four bins; the neighbouring bin is close."""
    pre = edit["probabilities"]["pre"]["rewrite"][0]
    post = edit["probabilities"]["post"]["rewrite"][0]
    truth = bin_of(post["p_new"])
    d = abs(choice - truth)
    score = 1.0 if d == 0 else 0.5 if d == 1 else 0.0
    text = (f"P({edit['target_new']!r}) after {edit['rewrite']!r} goes from {pre['p_new']:.3f} to "
            f"{post['p_new']:.3f} ({BINS[truth][2]}); P({edit['target_true']!r}) from {pre['p_true']:.3f} to "
            f"{post['p_true']:.3f}.")
    return Grade(_verdict(score), score, text, BINS[choice][2], BINS[truth][2])


# --- step 7: neighbours ----------------------------------------------------------------------------------------------
def neighbours(bleed: dict, n: int = 6) -> list[dict]:
    """The prompts about other subjects the question lists: the request's neighbourhood prompts first, then known
    facts of the same relation (at most n)."""
    rows = [r for r in bleed["rows"] if r["source"] == "neighborhood"]
    rows += [r for r in bleed["rows"] if r["source"] not in ("rewrite", "paraphrase", "neighborhood")]
    return rows[:n]


def moved(row: dict) -> bool:
    return row["delta_p_new"] >= MOVE


def grade_neighbours(bleed: dict, picked) -> Grade:
    """Q: which of these neighbours will move toward the new target? Score: the share classified correctly; all
    right is right, two thirds close."""
    rows = neighbours(bleed)
    picked = set(picked)
    if not rows:
        return Grade(CLOSE, 0.5, "This fact has no neighbour prompts to check.", "-", "-")
    correct = [moved(r) == (r["prompt"] in picked) for r in rows]
    score = sum(correct) / len(correct)
    truth = [r["prompt"] for r in rows if moved(r)]
    new = bleed["request"]["target_new"].strip()
    lines = "; ".join(f"{r['prompt']!r}: {r['p_new_before']:.3f} -> {r['p_new_after']:.3f}" for r in rows)
    text = (f"{len(truth)} of {len(rows)} moved (P({new!r}) up by at least {100 * MOVE:.0f} point): {lines}. "
            f"You classified {sum(correct)} of {len(rows)} correctly.")
    score = 1.0 if all(correct) else score
    return Grade(_verdict(score if score == 1.0 else min(score, 0.99) if score >= 2 / 3 else 0.0),
                 round(score, 3), text, ", ".join(sorted(picked)) or "none", ", ".join(truth) or "none")


# --- step 8: teacher-forced vs generated ----------------------------------------------------------------------------
def says_new(edit: dict) -> bool:
    """Does the edited model's greedy continuation of the prompt say the new target (and no longer the old)?"""
    return bool(edit["metrics"].get("post_gen_efficacy"))


def methods_conclusion(edits: dict) -> str:
    """The methods side by side in one sentence: the best by the summed probability margins on the fact's prompts
    (those within noise of it said), then which of them the greedy continuation shows saying the new target."""
    says = [e["label"] for e in edits.values() if says_new(e)]
    rest = [e["label"] for e in edits.values() if not says_new(e)]
    told = (f" Asked to continue the prompt, {_and(says) or 'none of them'} say{'s' if len(says) == 1 else ''} "
            f"the new target" + (f"; {_and(rest)} {'does' if len(rest) == 1 else 'do'} not." if rest else "."))
    return compute.methods_ranking(edits).sentence() + told


def retrace_conclusion(traces: dict) -> str:
    """After each method's edit (label -> the edited model's trace for the new target): where the new fact is
    carried most, each method's strongest state before the last token (no noise estimate: traces keep no
    per-sample spread, so no method is called better on these numbers alone)."""
    parts = []
    for label, tr in traces.items():
        (t, l), p = sites(tr)["early"], sites(tr)["early_p"]
        b, e = tr["subject_range"]
        where = "the last subject token" if t == e - 1 else "a subject token" if b <= t < e else "a later token"
        parts.append(f"{label}: {tr['tokens'][t]!r} ({where}) at layer {l}, p = {p:.3f}")
    return "Strongest state before the last token after each edit: " + "; ".join(parts) + "."


def grade_generation(edits: dict, picked) -> Grade:
    """Q: which methods make the model *say* the new target when it continues the prompt? Score: the share of
    methods classified correctly."""
    picked = set(picked)
    correct = [says_new(e) == (m in picked) for m, e in edits.items()]
    score = sum(correct) / len(correct) if correct else 0.0
    truth = [e["label"] for m, e in edits.items() if says_new(e)]
    tf = [e["label"] for m, e in edits.items() if e["metrics"].get("post_efficacy")]
    text = (f"Teacher-forced, P(new) > P(true) after the edit with {', '.join(tf) or 'none'}; in the greedy "
            f"continuation the new target is said by {', '.join(truth) or 'none'}. You classified "
            f"{sum(correct)} of {len(correct)} methods correctly.")
    labels = {m: e["label"] for m, e in edits.items()}
    return Grade(_verdict(score if score == 1.0 else min(score, 0.99) if score >= 0.5 else 0.0), round(score, 3),
                 text, ", ".join(sorted(labels.get(m, m) for m in picked)) or "none", ", ".join(truth) or "none")


# --- step 9: the layer sweep ----------------------------------------------------------------------------------------
SWEEP_CHOICES = ("yes", "no", "too close to tell: the difference is within noise")


def sweep_truth(sweep: dict) -> int:
    """Does the layer where the trace peaks (within one layer) edit best? 0 yes, 1 no, 2 within noise: the best
    layer near the peak and the best layer away from it differ by less than the noise over the prompts
    (evaluation/verdict.py). A sweep stored without per-prompt margins has no noise estimate: yes or no."""
    peak = sweep.get("peak_layer")
    if peak is None:
        return 1
    near = lambda l: abs(l - peak) <= 1  # noqa: E731
    best = sweep["best_layer"]
    ranking = compute.sweep_ranking(sweep)
    if ranking is not None and any(near(l) != near(best) for l in ranking.ties):
        return 2
    return 0 if near(best) else 1


def sweep_conclusion(sweep: dict) -> str:
    """The sweep in one sentence: the best layer by the summed margins, the layers within noise of it, and where
    the trace peaks."""
    ranking = compute.sweep_ranking(sweep)
    peak = sweep.get("peak_layer")
    where = (f" The MLP trace at {sweep['trace']['token']!r} peaks at layer {peak}." if sweep.get("trace") and
             peak is not None else "")
    if ranking is None:
        return (f"The edit works best at layer {sweep['best_layer']} (largest summed margin; this pack stores no "
                f"per-prompt margins to estimate the noise from).{where}")
    return ranking.sentence() + where


def grade_sweep(sweep: dict, choice: int) -> Grade:
    """Q: does the traced layer (within one layer) edit best? yes / no / too close to tell."""
    truth = sweep_truth(sweep)
    score = 1.0 if choice == truth else 0.5 if truth == 2 else 0.0
    text = sweep_conclusion(sweep)
    if truth == 2:
        text += " Layers near the trace's peak and away from it are within noise of each other: the data cannot say."
    return Grade(_verdict(score), score, text, SWEEP_CHOICES[choice].split(":")[0],
                 SWEEP_CHOICES[truth].split(":")[0])


# --- step 10: lifelong editing ---------------------------------------------------------------------------------------
NONE = "none of them"


def first_collapse(results: dict) -> str:
    """The method (label) whose perplexity first exceeded the collapse threshold, or NONE."""
    at = {r.get("label", m): r.get("collapsed_at") for m, r in results.items()}
    hit = {k: v for k, v in at.items() if v is not None}
    return min(hit, key=hit.get) if hit else NONE


def lifelong_conclusion(results: dict) -> str:
    """The runs in one sentence: which collapsed first, and which keeps the most edits at the end (by efficacy
    over the edits measured, with its binomial noise)."""
    return compute.lifelong_conclusion(results)


def grade_lifelong(results: dict, choice: str) -> Grade:
    truth = first_collapse(results)
    score = 1.0 if choice == truth else 0.0
    parts = []
    for m, r in results.items():
        row = next((x for x in r.get("rows", []) if x.get("collapsed")), None)
        parts.append(f"{r.get('label', m)}: " + (f"collapsed by edit {row['edit']} ({row.get('reason', '')})" if row
                                                  else "never collapsed"))
    text = ("A run counts as collapsed at a checkpoint where WikiText perplexity exceeds twice the unedited model's "
            f"or fewer than half of the earlier successful edits still hold. {'; '.join(parts)}. "
            + lifelong_conclusion(results))
    return Grade(_verdict(score), score, text, choice, truth)


# --- step 11: ripple effects ----------------------------------------------------------------------------------------
def ripple_asked(out: dict) -> dict:
    """The ripple part with only the implied facts step 11 asks about: those whose state before the edit fits their
    question. One that should stay was the model's top answer before the edit (a fact it never gave is not one the
    edit can keep), one that should move was not. editkit's derivation keeps only such facts
    (data/implications.py); a part records `top1_before`. In one built before it did, a fact that should stay is
    asked only when its probability before the edit shows it was the top answer for certain (above 0.5, so each
    of its tokens was the argmax): below that the part cannot tell (the Space Needle's continent at
    0.17 was graded 'failed' though the model never gave it)."""
    def fits(f: dict) -> bool:
        top = f.get("top1_before")
        if top is None:
            return f["move"] or (f.get("p_before") or 0.0) > 0.5
        return top != f["move"]

    keep = [i for i, f in enumerate(out.get("facts") or []) if fits(f)]
    if len(keep) == len(out.get("facts") or []):
        return out
    methods = {m: {**r, "outcomes": [r["outcomes"][i] for i in keep]} for m, r in out["methods"].items()}
    return {**out, "facts": [out["facts"][i] for i in keep], "methods": methods}


def ripple_rows(out: dict, method: str = "rome") -> list[dict]:
    """The implied facts step 11 asks about (ripple_asked) with the method's outcome: {"prompt", "answer", "move",
    "criterion", "passed", ...}."""
    out = ripple_asked(out)
    m = out["methods"].get(method)
    if not m:
        return []
    return [{**f, "passed": o["verdict"] != "failed", "p_after": o["p_after"]}
            for f, o in zip(out["facts"], m["outcomes"])]


def ripple_conclusion(out: dict) -> str:
    """The ripple part in one sentence, said from its numbers by today's wording (a pack keeps the sentence of the
    editkit that built it: the shipped pack's reads "All 2 score the same" and "0 moved" where no fact should move)."""
    from ..evaluation.ripple import conclusion

    return conclusion(ripple_asked(out))


def grade_ripple(out: dict, picked, method: str = "rome") -> Grade:
    """Q: after the edit, which implied facts will say their expected answer (moved there, or still there)? Score:
    the share classified correctly; all right is right, two thirds close."""
    rows = ripple_rows(out, method)
    picked = set(picked)
    if not rows:
        return Grade(CLOSE, 0.5, out.get("message") or "no implied fact the model knows", "-", "-")
    correct = [r["passed"] == (r["prompt"] in picked) for r in rows]
    score = sum(correct) / len(correct)
    truth = [r["prompt"] for r in rows if r["passed"]]
    lines = "; ".join(f"{r['prompt']!r} → {r['answer'].strip()!r}: {r['p_before']:.3f} -> {r['p_after']:.3f}"
                      f" ({'ok' if r['passed'] else 'failed'})" for r in rows)
    text = (f"{len(truth)} of {len(rows)} ended as they should (a fact does when its expected answer is the "
            f"model's top answer after the edit, every token the argmax: a P that rose can still be below another "
            f"answer): {lines}. You classified {sum(correct)} of {len(rows)} correctly.")
    score = 1.0 if all(correct) else score
    return Grade(_verdict(score if score == 1.0 else min(score, 0.99) if score >= 2 / 3 else 0.0),
                 round(score, 3), text, ", ".join(sorted(picked)) or "none", ", ".join(truth) or "none")
