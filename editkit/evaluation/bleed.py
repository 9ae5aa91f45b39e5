"""The bleed map: which other facts an edit moved, and whether the update itself predicts it.

An edit changes a linear map W (a down-projection; for PMET's ablation also W_O) by Delta W. At any token of any
prompt whose input to that map is k, the map's output changes by exactly Delta W k. A method that can say what this
means for other keys declares a prediction (Method.predict_share, editing/share.py): a share s at every token, s = 1
"looks like the edited subject to this update", s = 0 "untouched". ROME's update is rank one (Eq. 2), so
Delta W k = s(k) (v* - W k*) with s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*: every token receives the edited subject's
own change, scaled. MEMIT, PMET and AlphaEdit predict with the projection of what their update writes at a token onto
what it writes for the edited subject. A neighbour whose key has a large s at some token is pushed towards the new
target there: that is bleed.

`bleed_map` edits through run_edit, and reports per prompt the largest |s| over its tokens (and at which token) next
to the measured rise of P(target_new) after the prompt. It also checks the prediction: the measured change of the
edited maps' outputs at every token of every prompt against the predicted change (`check.max_error`, relative to
the largest change). A method without a prediction shows the measured rises only (share, formula and check None).

Prompts: the request's neighbourhood prompts (other subjects, same relation), known facts of the same relation
(ROME's known_1000; the relation is given, or found from the request's prompt template in the shipped CounterFact
and known-facts records) and, as reference points, the rewrite and paraphrase prompts.
"""
from __future__ import annotations


import torch

from ..core.errors import EditkitError
from ..core.progress import part
from ..data.facts import known_facts
from ..data.implications import relation_of as template_relation
from ..editing.api import run_edit
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_requests
from ..editing.share import key_sites
from ..model import isolation
from ..model.scoring import score_targets
from ..model.sites import Site
from ..model.tokens import encode

OUTPUT_SITE = {"down_proj": "mlp_out", "o_proj": "attn_out"}  # the site carrying each edited map's output


def relation_of(request: EditRequest) -> str | None:
    """The Wikidata relation of a request: its own, or its prompt template's when the shipped records use that
    template for one relation only ("{} is located in" serves four: None, pass the relation instead)."""
    return request.relation or template_relation(request.prompt)


def prompts_for(request: EditRequest, relation: str | None = None, n_facts: int = 20,
                extra: list[str] | None = None) -> list[dict]:
    """The prompts a bleed map measures: rewrite and paraphrases (references), the request's neighbourhood
    prompts, up to n_facts known facts of the same relation (other subjects whose answer is not target_new
    already) and `extra` prompts."""
    rows = [{"prompt": request.rewrite, "source": "rewrite"}]
    rows += [{"prompt": p, "source": "paraphrase"} for p in request.paraphrase_prompts]
    rows += [{"prompt": p, "source": "neighborhood"} for p in request.neighborhood_prompts]
    relation = relation or relation_of(request)
    if relation and n_facts > 0:
        same = [f for f in known_facts() if f["relation_id"] == relation and f["subject"] != request.subject
                and request.subject not in f["prompt"]
                and f["attribute"].strip() != request.target_new.strip()]  # already true: not a side effect
        rows += [{"prompt": f["prompt"], "source": "known fact", "subject": f["subject"],
                  "true": " " + f["attribute"].strip()} for f in same[:n_facts]]
    rows += [{"prompt": p, "source": "extra"} for p in (extra or []) if p.strip()]
    seen, out = set(), []
    for r in rows:
        if r["prompt"] not in seen:
            seen.add(r["prompt"])
            out.append(r)
    return out


@torch.no_grad()
def _read(lm, prompts: list[str], sites: list[Site]) -> tuple[dict, torch.Tensor]:
    """{site name: (batch, tokens, width)} for right-padded prompts (the run stops once all are read), and the
    attention mask."""
    batch = encode(lm, prompts)
    got = lm.runner.read(sites, **batch) if sites else {}
    return {k: v.float() for k, v in got.items()}, batch["attention_mask"]


def _probs(lm, prompts: list[str], target: str) -> list[float]:
    return [s.prob for s in score_targets(lm, prompts, [target] * len(prompts))]


def bleed_map(lm, method: str, request, hparams: dict | None = None, relation: str | None = None,
              n_facts: int = 20, extra: list[str] | None = None, progress=None) -> dict:
    """Edit `request` with `method` and map its bleed (module docstring). The model is unchanged afterwards."""
    spec = get(method)
    if not isinstance(request, EditRequest):
        reqs = parse_requests(request)
        if len(reqs) != 1:
            raise EditkitError("a bleed map is for one request")
        request = reqs[0]
    hp = load_hparams(spec.name, lm, hparams)
    rows = prompts_for(request, relation, n_facts, extra)
    if progress:
        progress(0.0, f"{spec.label}: editing")
    with isolation.session(lm):
        result = run_edit(lm, spec.name, [request], hp, progress=part(progress, 0, 0.7) if progress else None,
                          solves=True)
        prediction = spec.predict_share(lm, result) if spec.predict_share else None
    maps = prediction.maps if prediction else []
    prompts = [r["prompt"] for r in rows]
    keys_in = key_sites(maps)
    out_sites = [Site(OUTPUT_SITE[kind], l) for kind, l, _ in maps]
    if progress:
        progress(0.75, "reading keys and outputs before and after the edit")
    with isolation.session(lm):
        before, mask = _read(lm, prompts, out_sites)
        p_before = _probs(lm, prompts, request.target_new)
    with isolation.session(lm, result.delta):
        after, _ = _read(lm, prompts, keys_in + out_sites)
        p_after = _probs(lm, prompts, request.target_new)
    share, check = None, None
    if prediction:
        keys = [after[s.name] for s in keys_in]  # (batch, tokens, width) per edited map
        worst, largest, m = 0.0, 0.0, mask.bool()
        for i in range(prediction.checked):  # the maps whose keys the edit leaves unchanged
            measured = after[out_sites[i].name] - before[out_sites[i].name]
            worst = max(worst, float((prediction.change(i, keys[i]) - measured)[m].abs().max()))
            largest = max(largest, float(measured[m].abs().max()))
        share = prediction.share(keys)  # (batch, tokens)
        check = {"max_error": worst / max(largest, 1e-30), "max_abs_error": worst, "largest_change": largest,
                 "what": "measured change of the edited map's output at every token vs the prediction"
                         + ("" if prediction.checked >= len(maps) else " (first edited layer; later layers' keys "
                            "also move)")}
    out_rows = []
    for b, r in enumerate(rows):
        ids = encode(lm, r["prompt"])["input_ids"][0]
        row = {**r, "p_new_before": p_before[b], "p_new_after": p_after[b], "delta_p_new": p_after[b] - p_before[b],
               "share": None, "position": None, "token": None, "shares": None}
        if share is not None:
            s = share[b, :int(mask[b].sum())]
            t = int(s.abs().argmax())
            row.update({"share": float(s[t]), "position": t, "token": lm.tok.decode([int(ids[t])]),
                        "shares": [round(float(x), 5) for x in s]})
        row["tokens"] = [lm.tok.decode([int(i)]) for i in ids]
        out_rows.append(row)
    neighbours = [r for r in out_rows if r["source"] not in ("rewrite", "paraphrase")]
    if progress:
        progress(1.0, "bleed map done")
    return {"model": lm.name, "method": spec.name, "request": request.to_dict(), "relation": relation
            or relation_of(request), "maps": [name for _, _, name in maps] if maps else sorted(result.delta),
            "rows": out_rows, "formula": prediction.formula if prediction else None,
            "share_axis": prediction.axis if prediction else None, "check": check,
            "summary": _summary(neighbours), "hparams": hp.to_dict()}


def _summary(rows: list[dict]) -> dict:
    """How many neighbours flipped toward the new target, and how well the share orders the rises."""
    if not rows:
        return {"neighbours": 0}
    rises = [r["delta_p_new"] for r in rows]
    s = [r["share"] for r in rows]
    predicted = all(x is not None for x in s)
    return {"neighbours": len(rows), "mean_delta_p_new": sum(rises) / len(rises),
            "max_delta_p_new": max(rises), "mean_share": sum(s) / len(s) if predicted else None,
            "spearman_share_vs_rise": _spearman(s, rises) if predicted else None}


def _spearman(x: list[float], y: list[float]) -> float | None:
    if len(x) < 3:
        return None

    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    rx, ry = torch.tensor(ranks(x)), torch.tensor(ranks(y))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(rx.norm() * ry.norm())
    return float(rx @ ry) / den if den else None
