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

from dataclasses import dataclass, field

import torch

from ..core.errors import EditkitError
from ..core.progress import part
from ..core.results import JsonObject, Result, frame
from ..data.facts import known_facts
from ..data.implications import relation_of as template_relation
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_record, parse_requests
from ..editing.run import run_edit
from ..editing.share import key_sites
from ..figures.side_effects import bleed_figure
from ..model import isolation
from ..model.scoring import score_targets
from ..model.sites import Site
from ..model.tokens import encode

OUTPUT_SITE = {"down_proj": "mlp_out", "o_proj": "attn_out"}  # the site carrying each edited map's output


@dataclass
class BleedRow:
    """One measured prompt: where it comes from ("rewrite", "paraphrase", "neighborhood", "known fact", "extra"),
    P(target_new) after it before and after the edit, and the update's largest predicted share |s| over its tokens
    (`share` at `position`, the `token`; every token's in `shares`; None for a method without a prediction)."""

    prompt: str
    source: str
    p_new_before: float
    p_new_after: float
    delta_p_new: float
    tokens: list[str]
    share: float | None = None
    position: int | None = None
    token: str | None = None
    shares: list[float] | None = None
    subject: str | None = None  # known facts: their subject and true answer
    true: str | None = None

    def to_json(self) -> JsonObject:
        d = {"prompt": self.prompt, "source": self.source}
        if self.subject is not None:
            d.update(subject=self.subject, true=self.true)
        d.update(p_new_before=self.p_new_before, p_new_after=self.p_new_after, delta_p_new=self.delta_p_new,
                 share=self.share, position=self.position, token=self.token, shares=self.shares,
                 tokens=self.tokens)
        return d


@dataclass
class BleedSummary:
    """Over the neighbours (every prompt but the rewrite and paraphrases): how many, the mean and largest rise of
    P(new), the mean share and the rank correlation of share and rise (None without a prediction)."""

    neighbours: int
    mean_delta_p_new: float | None = None
    max_delta_p_new: float | None = None
    mean_share: float | None = None
    spearman_share_vs_rise: float | None = None

    def to_json(self) -> JsonObject:
        if not self.neighbours:
            return {"neighbours": 0}
        return {"neighbours": self.neighbours, "mean_delta_p_new": self.mean_delta_p_new,
                "max_delta_p_new": self.max_delta_p_new, "mean_share": self.mean_share,
                "spearman_share_vs_rise": self.spearman_share_vs_rise}


@dataclass
class BleedMap(Result):
    """Which other facts one edit moved (module docstring): one BleedRow per prompt, the method's prediction
    (`formula`, `share_axis`), the check of the prediction against the measured change (`check`: max_error
    relative to the largest change; None without a prediction), and the neighbours' summary."""

    model: str
    method: str
    request: EditRequest
    relation: str | None
    maps: list[str]
    rows: list[BleedRow]
    formula: str | None
    share_axis: str | None
    check: dict | None
    summary: BleedSummary
    hparams: dict | None = field(default=None, compare=False)  # the complete hyperparameters (the lesson drops them)

    @property
    def neighbours(self) -> list[BleedRow]:
        """The rows about other subjects (not the rewrite or its paraphrases)."""
        return [r for r in self.rows if r.source not in ("rewrite", "paraphrase")]

    def headline(self) -> str:
        s = self.summary
        if not s.neighbours:
            return f"{self.method}: no neighbours measured"
        return (f"{self.method}: {s.neighbours} neighbours, P({self.request.target_new.strip()}) rose by "
                f"{s.mean_delta_p_new:+.3f} on average, at most {s.max_delta_p_new:+.3f}")

    def to_json(self) -> JsonObject:
        d = {"model": self.model, "method": self.method, "request": self.request.to_dict(),
             "relation": self.relation, "maps": self.maps, "rows": [r.to_json() for r in self.rows],
             "formula": self.formula, "share_axis": self.share_axis, "check": self.check,
             "summary": self.summary.to_json()}
        if self.hparams is not None:
            d["hparams"] = self.hparams
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "BleedMap":
        return cls(d["model"], d["method"], parse_record(d["request"]), d["relation"], d["maps"],
                   [BleedRow(**r) for r in d["rows"]], d["formula"], d["share_axis"], d["check"],
                   BleedSummary(**d["summary"]), d.get("hparams"))

    def to_frame(self):
        """One row per prompt: source, prompt, P(new) before and after, its rise, the largest share and token."""
        return frame([{k: v for k, v in r.to_json().items() if k not in ("shares", "tokens")} for r in self.rows])

    def figure(self):
        """The predicted share (x) against the measured rise of P(new) (y), one point per prompt."""
        return bleed_figure(self.to_json())


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
              n_facts: int = 20, extra: list[str] | None = None, progress=None) -> BleedMap:
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
        row = BleedRow(r["prompt"], r["source"], p_before[b], p_after[b], p_after[b] - p_before[b],
                       [lm.tok.decode([int(i)]) for i in ids], subject=r.get("subject"), true=r.get("true"))
        if share is not None:
            s = share[b, :int(mask[b].sum())]
            t = int(s.abs().argmax())
            row.share, row.position, row.token = float(s[t]), t, lm.tok.decode([int(ids[t])])
            row.shares = [round(float(x), 5) for x in s]
        out_rows.append(row)
    neighbours = [r for r in out_rows if r.source not in ("rewrite", "paraphrase")]
    if progress:
        progress(1.0, "bleed map done")
    return BleedMap(lm.name, spec.name, request, relation or relation_of(request),
                    [name for _, _, name in maps] if maps else sorted(result.delta), out_rows,
                    prediction.formula if prediction else None, prediction.axis if prediction else None, check,
                    _summary(neighbours), hp.to_dict())


def _summary(rows: list[BleedRow]) -> BleedSummary:
    """How many neighbours flipped toward the new target, and how well the share orders the rises."""
    if not rows:
        return BleedSummary(0)
    rises = [r.delta_p_new for r in rows]
    s = [r.share for r in rows]
    predicted = all(x is not None for x in s)
    return BleedSummary(len(rows), sum(rises) / len(rises), max(rises), sum(s) / len(s) if predicted else None,
                        _spearman(s, rises) if predicted else None)


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
