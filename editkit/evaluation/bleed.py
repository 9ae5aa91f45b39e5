"""The bleed map: which other facts an edit moved, and why the update itself predicts it.

An edit changes a linear map W (a down-projection; for PMET's ablation also W_O) by Delta W. At any token of any
prompt whose input to that map is k, the map's output changes by exactly Delta W k. ROME's update is rank one
(Eq. 2), Delta W = Lambda (C^-1 k*)^T with Lambda = (v* - W k*) / ((C^-1 k*)^T k*), so

    Delta W k = s(k) * (v* - W k*),        s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*,

every token receives the same change the edited subject receives, scaled by s(k): s = 1 is "looks like the edited
subject to this update", s = 0 is "untouched". A neighbour whose key has a large s at some token is pushed towards
the new target there: that is bleed. MEMIT, PMET and AlphaEdit spread a higher-rank update over several layers;
their share is the same idea with their own Delta W,

    s(prompt, t) = sum_l <Delta W_l k_{l,t}, Delta W_l k*_l> / sum_l ||Delta W_l k*_l||^2,

the projection of what the update writes at token t onto what it writes for the edited subject (keys k_{l,t} read
in the edited model, k*_l the subject's template-averaged keys, ROME Eq. 3). For a rank-one update both formulas
agree. `bleed_map` reports, per prompt, the largest |s| over its tokens (and at which token), next to the
measured rise of P(target_new) after the prompt. It also checks the prediction: the measured change of every edited
map's output at every token of every prompt against Delta W k (for ROME against Lambda (C^-1 k*)^T k, from the
edit's own C, k* and v*), reported as `check.max_error` relative to the largest change.

Prompts: the request's neighbourhood prompts (other subjects, same relation), known facts of the same relation
(ROME's known_1000; the relation is given, or found from the request's prompt template in the shipped CounterFact
and known-facts records) and, as reference points, the rewrite and paraphrase prompts.
"""
from __future__ import annotations

import json
from functools import lru_cache

import torch

from .. import isolation
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_requests
from ..editing.stats import MODULES, key_statistics
from ..editing.keys import read_sites
from ..errors import EditkitError
from ..facts import known_facts
from ..hooks import Hooks
from ..paths import DATA
from ..scoring import score_targets
from ..sites import Site
from ..text import encode

OUTPUT_SITE = {"down_proj": "mlp_out", "o_proj": "attn_out"}  # the site carrying each edited map's output


@lru_cache(maxsize=1)
def _relations() -> dict[str, set]:
    """Prompt template ("{} is located in") -> the Wikidata relation ids of the shipped records using it."""
    out: dict[str, set] = {}
    for f in known_facts():
        out.setdefault(f["prompt"].replace(f["subject"], "{}", 1), set()).add(f["relation_id"])
    try:
        cf = json.loads((DATA / "counterfact" / "counterfact_500.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cf = []
    for d in cf:
        rw = d.get("requested_rewrite", {})
        if rw.get("prompt") and rw.get("relation_id"):
            out.setdefault(rw["prompt"], set()).add(rw["relation_id"])
    return out


def relation_of(request: EditRequest) -> str | None:
    """The Wikidata relation of a request's prompt template when the shipped records use that template for one
    relation only ("{} is located in" serves four: None, pass the relation instead)."""
    found = _relations().get(request.prompt, set())
    return next(iter(found)) if len(found) == 1 else None


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


def edited_maps(lm, delta: dict) -> list[tuple[str, int, str]]:
    """(part, layer, parameter name) of every edited linear map in a delta, by layer."""
    names = {}
    for part in MODULES:
        for l in range(lm.adapter.n_layers):
            try:
                names[lm.adapter.param_name(part, l)] = (part, l)
            except EditkitError:
                break  # a family without this part
    out = []
    for name in delta:
        if name not in names:
            raise EditkitError(f"the bleed map follows edits of down-projections and W_O; {name} is neither")
        out.append((*names[name], name))
    return sorted(out, key=lambda x: (x[1], x[0]))


def _math(lm, part: str, d: torch.Tensor) -> torch.Tensor:
    return d.T if lm.adapter.family.conv1d and part in MODULES else d


@torch.no_grad()
def _read(lm, prompts: list[str], sites: list[Site]) -> tuple[dict, torch.Tensor]:
    """{site name: (batch, tokens, width)} for right-padded prompts, and the attention mask."""
    batch = encode(lm, prompts)
    with Hooks(lm) as hooks:
        got = hooks.capture(sites)
        lm.runner.run_until(Site("resid_post", max(s.layer for s in sites)), **batch)
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
    debug: list = []
    with isolation.session(lm):
        result = spec.apply(lm, [request], hp, progress=(lambda f, m: progress(0.7 * f, m)) if progress else None,
                            debug=debug)
    maps = edited_maps(lm, result.delta)
    prompts = [r["prompt"] for r in rows]
    key_sites = [Site(MODULES[part], l) for part, l, _ in maps]
    out_sites = [Site(OUTPUT_SITE[part], l) for part, l, _ in maps]
    if progress:
        progress(0.75, "reading keys and outputs before and after the edit")
    with isolation.session(lm):
        before, mask = _read(lm, prompts, out_sites)
        p_before = _probs(lm, prompts, request.target_new)
    with isolation.session(lm, result.delta):
        after, _ = _read(lm, prompts, key_sites + out_sites)
        p_after = _probs(lm, prompts, request.target_new)
        star = read_sites(lm, [request], hp, {f"k{i}": s for i, s in enumerate(key_sites)}, {})
    dWs = [_math(lm, part, result.delta[name].float()) for part, l, name in maps]
    k_star = [star[f"k{i}"][:, 0] for i in range(len(maps))]
    ref = [dW @ k for dW, k in zip(dWs, k_star)]  # what the update writes for the edited subject, per map
    denom = sum(float(r @ r) for r in ref)
    rome = spec.name == "rome" and len(maps) == 1 and len(debug) == 1
    if rome:  # ROME Eq. 2 from the edit's own C, k* and v*: Delta W k = Lambda (C^-1 k*)^T k
        u, lam = _rome_factors(lm, hp, maps[0][1], debug[0])
    shares, worst, largest = [], 0.0, 0.0
    for i, (part, l, name) in enumerate(maps):
        K = after[key_sites[i].name]  # (batch, tokens, width)
        direct = K @ dWs[i].T  # Delta W k at every token, (batch, tokens, d_out)
        predicted = (K @ u.float())[..., None] * lam.float() if rome else direct
        measured = after[out_sites[i].name] - before[out_sites[i].name]
        if i == 0 or rome:  # the first edited map's keys are unchanged by the edit: the change is Delta W k
            m = mask.bool()
            worst = max(worst, float((predicted - measured)[m].abs().max()))
            largest = max(largest, float(measured[m].abs().max()))
        shares.append((direct @ ref[i]) / max(denom, 1e-30))
    share = sum(shares)  # (batch, tokens)
    if rome:  # s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k* with the edit's own k*
        share = (after[key_sites[0].name] @ u.float()) / float(u @ debug[0]["k_star"].double())
    out_rows = []
    for b, r in enumerate(rows):
        n_tok = int(mask[b].sum())
        s = share[b, :n_tok]
        ids = encode(lm, r["prompt"])["input_ids"][0]
        t = int(s.abs().argmax())
        out_rows.append({**r, "p_new_before": p_before[b], "p_new_after": p_after[b],
                         "delta_p_new": p_after[b] - p_before[b], "share": float(s[t]), "position": t,
                         "token": lm.tok.decode([int(ids[t])]), "shares": [round(float(x), 5) for x in s],
                         "tokens": [lm.tok.decode([int(i)]) for i in ids]})
    neighbours = [r for r in out_rows if r["source"] not in ("rewrite", "paraphrase")]
    if progress:
        progress(1.0, "bleed map done")
    return {"model": lm.name, "method": spec.name, "request": request.to_dict(), "relation": relation
            or relation_of(request), "maps": [name for _, _, name in maps], "rows": out_rows,
            "formula": "Lambda (C^-1 k*)^T k (ROME Eq. 2)" if rome else "Delta W k (the method's own update)",
            "check": {"max_error": worst / max(largest, 1e-30), "max_abs_error": worst, "largest_change": largest,
                      "what": "measured change of the edited map's output at every token vs the prediction"
                              + ("" if rome or len(maps) == 1 else " (first edited layer; later layers' keys "
                                 "also move)")},
            "summary": _summary(neighbours), "hparams": hp.to_dict()}


def _rome_factors(lm, hp, layer: int, dbg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """u = C^-1 k* and Lambda = (v* - W k_den - b) / (u^T k_den) of ROME Eq. 2, from the statistics the edit used
    (same estimator), the base W and the edit's k*, v* (float64)."""
    C = key_statistics(lm, [layer], hp)[layer].double()
    if not getattr(hp, "mom2_adjustment", True):
        C = torch.eye(C.shape[0], dtype=torch.float64, device=C.device)
    k_star, v_star, k_den = (dbg[k].double() for k in ("k_star", "v_star", "k_den"))
    u = torch.linalg.solve(C, k_star)
    W = lm.adapter.weight("down_proj", layer).detach().double()
    b = lm.adapter.down_bias(layer)
    current = W @ k_den + (b.detach().double() if b is not None else 0)
    return u, (v_star - current) / (u @ k_den)


def _summary(rows: list[dict]) -> dict:
    """How many neighbours flipped toward the new target, and how well the share orders the rises."""
    if not rows:
        return {"neighbours": 0}
    rises = [r["delta_p_new"] for r in rows]
    s = [r["share"] for r in rows]
    return {"neighbours": len(rows), "mean_delta_p_new": sum(rises) / len(rises),
            "max_delta_p_new": max(rises), "mean_share": sum(s) / len(s),
            "spearman_share_vs_rise": _spearman(s, rises)}


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
