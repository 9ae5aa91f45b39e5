"""What ROME, MEMIT and PMET share: keys k at the subject's last token, and target vectors found by gradient descent.

Keys (ROME Sec. 3.1, Eq. 3): k* = mean over context templates x_j of the down-projection input at the subject's last
token of x_j + prompt(subject).

Targets (ROME Eq. 4; MEMIT Eq. 16; PMET Eq. 10): free vectors delta_site are added to the output of one or more
"sites" (the MLP output for ROME, the block output (residual) for MEMIT, the attention and MLP outputs for PMET) at
the subject's last token of every prompt, and optimized with Adam to minimize
    NLL(target_new | context + prompt)                       (averaged over templates and target tokens)
  + kl_factor * KL(P_orig || P_delta) on "{subject} is a"   (at the subject's last token, as upstream)
  + v_weight_decay * ||delta|| / ||init||^2,
with ||delta|| clamped to clamp_norm_factor * ||init|| after each step and early stopping (loss < 5e-2; PMET: once the
target is the argmax at every target position, the NLL weight drops to 0.1 and it stops when KL <= 0.01, App. D).
"""
from __future__ import annotations

import torch

from ..errors import EditkitError
from ..hooks import Hooks
from ..scoring import target_ids
from ..text import find_subject_range
from .context import context_templates
from .requests import EditRequest


def site_module(lm, site: str, layer: int):
    a = lm.adapter
    return {"mlp": a.mlp, "block": a.block, "attn": a.attn}[site](layer)


def _subject_last(tok, text: str, subject: str, from_char: int) -> int:
    """Token index of the subject's last token, for the occurrence at or after character `from_char`."""
    occurrence = text[:from_char].count(subject)
    return find_subject_range(tok, text, subject, occurrence)[1] - 1


def contexts(lm, request: EditRequest, hp: dict) -> list[tuple[str, int]]:
    """(text, char offset of the prompt) for each context template applied to the rewrite prompt."""
    out = []
    for tmpl in context_templates(lm, hp.get("context_templates", 5), hp.get("context_length", 10)):
        prefix = tmpl.split("{}")[0]
        out.append((prefix + request.rewrite, len(prefix)))
    return out


def _pad(lm, rows: list[list[int]]):
    width = max(len(r) for r in rows)
    pad = lm.tok.pad_token_id if lm.tok.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids.to(lm.device), mask.to(lm.device)


@torch.no_grad()
def keys_at(lm, layer: int, texts: list[tuple[str, int]], subject: str) -> torch.Tensor:
    """Down-projection inputs (len(texts), d_ff) at the subject's last token of each text."""
    rows = [lm.tok(t, add_special_tokens=True)["input_ids"] for t, _ in texts]
    idx = [_subject_last(lm.tok, t, subject, c) for t, c in texts]
    ids, mask = _pad(lm, rows)
    with Hooks() as hooks:
        cache = hooks.capture({"k": lm.adapter.down_proj(layer)}, what="input")
        getattr(lm.model, lm.model.base_model_prefix)(input_ids=ids, attention_mask=mask, use_cache=False)
    return cache["k"][torch.arange(len(rows)), torch.tensor(idx)].float()


def key_star(lm, layer: int, request: EditRequest, hp: dict) -> torch.Tensor:
    """k*: the template-averaged key (d_ff,)."""
    return keys_at(lm, layer, contexts(lm, request, hp), request.subject).mean(0)


@torch.no_grad()
def site_output(lm, site: str, layer: int, request: EditRequest) -> torch.Tensor:
    """Output of the site's module at the subject's last token of the plain rewrite prompt (d_model,)."""
    text = request.rewrite
    idx = _subject_last(lm.tok, text, request.subject, 0)
    ids = lm.tok(text, return_tensors="pt", add_special_tokens=True)["input_ids"].to(lm.device)
    module = site_module(lm, site, layer)
    with Hooks() as hooks:
        out = hooks.capture({"m": module})
        getattr(lm.model, lm.model.base_model_prefix)(input_ids=ids, use_cache=False)
    return out["m"][0, idx].float()


def optimize_targets(lm, request: EditRequest, layer: int, sites: tuple[str, ...], hp: dict,
                     adaptive: bool = False) -> dict:
    """Optimize one delta per site at `layer`; returns {site: {"init", "delta", "target"}, "losses": [...]}."""
    tok = lm.tok
    t_ids = target_ids(tok, request.target_new)
    rows, lookup, tgt_pos = [], [], []
    for text, offset in contexts(lm, request, hp):
        p_ids = tok(text, add_special_tokens=True)["input_ids"]
        rows.append(p_ids + t_ids[:-1])
        lookup.append(_subject_last(tok, text, request.subject, offset))
        tgt_pos.append([len(p_ids) - 1 + j for j in range(len(t_ids))])
    kl_text = f"{request.subject} is a"
    rows.append(tok(kl_text, add_special_tokens=True)["input_ids"])
    lookup.append(_subject_last(tok, kl_text, request.subject, 0))
    ids, mask = _pad(lm, rows)
    n_rw = len(rows) - 1
    lookup_t = torch.tensor(lookup, device=lm.device)
    row_t = torch.arange(len(rows), device=lm.device)
    pos = torch.tensor(tgt_pos, device=lm.device)  # (n_rw, m)
    tgt = torch.tensor(t_ids, device=lm.device).expand(n_rw, -1)
    body = getattr(lm.model, lm.model.base_model_prefix)
    a = lm.adapter

    d = a.d_model
    deltas = {s: torch.zeros(d, device=lm.device, requires_grad=True) for s in sites}
    init: dict[str, torch.Tensor] = {}

    # Blocks below `layer` do not depend on the deltas: run them once, keep the residual entering block `layer` and
    # the arguments the model passes to each later block (masks, rotary embeddings), then run only the rest.
    block_args: dict[int, tuple] = {}
    with Hooks() as hooks, torch.no_grad():
        entry = hooks.capture({"h": a.block(layer)}, what="input")
        handles = [a.block(l).register_forward_pre_hook(
            lambda mod, args, kwargs, l=l: block_args.__setitem__(l, (tuple(args[1:]), dict(kwargs))),
            with_kwargs=True) for l in range(layer, a.n_layers)]
        try:
            body(input_ids=ids, attention_mask=mask, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
    h_entry = entry["h"]

    def forward():
        with Hooks() as hooks:
            for s in sites:
                def add(h, s=s):
                    if s not in init:
                        init[s] = h[0, lookup[0]].detach().float().clone()
                    h = h.clone()
                    h[row_t, lookup_t] = h[row_t, lookup_t] + deltas[s].to(h.dtype)
                    return h
                hooks.set_output(site_module(lm, s, layer), add)
            h = h_entry
            for l in range(layer, a.n_layers):
                args, kwargs = block_args[l]
                out = a.block(l)(h, *args, **kwargs)
                h = out[0] if isinstance(out, (tuple, list)) else out

        # final norm + unembedding, only where the loss looks
        rw = a.unembed(h[torch.arange(n_rw, device=lm.device)[:, None], pos]).float()  # (n_rw, m, V)
        kl = a.unembed(h[n_rw, lookup[-1]]).float()  # (V,)
        return rw, kl

    opt = torch.optim.Adam(list(deltas.values()), lr=hp["v_lr"])
    kl_init = None
    losses = []
    nll_weight = hp.get("nll_loss_factor", 1.0)
    with torch.enable_grad():
        for step in range(hp["v_num_grad_steps"]):
            opt.zero_grad()
            rw, kl_logits = forward()
            logp = torch.log_softmax(rw, -1)
            nll = -(logp.gather(2, tgt[..., None])[..., 0].sum(1) / len(t_ids)).mean()
            kl_logp = torch.log_softmax(kl_logits, -1)
            if kl_init is None:
                kl_init = kl_logp.detach().clone()
            kl = torch.nn.functional.kl_div(kl_logp[None], kl_init[None], log_target=True, reduction="batchmean")
            decay = sum(deltas[s].norm() / init[s].norm() ** 2 for s in sites)
            w = nll_weight
            if adaptive and bool((rw.argmax(-1) == tgt).all()):
                w = 0.1 * nll_weight  # PMET: the target already wins; favour preserving the rest
                if kl.item() <= 0.01:
                    losses.append({"step": step, "loss": (w * nll + hp["kl_factor"] * kl).item(),
                                   "nll": nll.item(), "kl": kl.item()})
                    break
            loss = w * nll + hp["kl_factor"] * kl + hp["v_weight_decay"] * decay
            losses.append({"step": step, "loss": loss.item(), "nll": nll.item(), "kl": kl.item(),
                           "p_target": float(torch.exp(-nll.detach() * len(t_ids)))})
            if not torch.isfinite(loss):
                raise EditkitError("the target optimisation diverged (loss is not finite); lower v_lr")
            if not adaptive and loss.item() < 5e-2:
                break
            if step == hp["v_num_grad_steps"] - 1:
                break
            loss.backward()
            opt.step()
            with torch.no_grad():
                for s in sites:
                    limit = hp["clamp_norm_factor"] * init[s].norm()
                    if deltas[s].norm() > limit:
                        deltas[s].mul_(limit / deltas[s].norm())
    out = {"losses": losses}
    for s in sites:
        delta = deltas[s].detach().float()
        out[s] = {"init": init[s], "delta": delta, "target": init[s] + delta}
    return out
