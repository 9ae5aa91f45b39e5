"""Reading what the methods solve with: keys k and site values at the subject's last token (the "compute_u" half of
kmeng01/rome; the targets, its "compute_v" half, are in targets.py).

Keys (ROME Sec. 3.1, Eq. 3): k* = mean over context templates x_j of the down-projection input at the subject's last
token of x_j + prompt(subject). `SiteReader` reads keys and other sites for a batch of requests, again and again
while a multi-layer edit is applied layer after layer (spread.py).

Inside `reuse_keys()` the keys `keys_at` reads are kept per (weights this context sees, layer, texts, subject): a
lesson's ROME edit, its bleed map, its ripple and the layer sweep's row at that layer read them once, and
`prefetch_keys` reads one request's keys at many layers in one run (a layer sweep), each equal to the run that stops
at its layer (the same rows, the same blocks up to it).
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch

from ..core.errors import EditkitError
from ..model.hooks import Hooks
from ..model.sites import Site, parse, site
from ..model.tokens import find_subject_range, pad_right
from .context import context_templates
from .requests import EditRequest


def subject_last(tok, text: str, subject: str, from_char: int) -> int:
    """Token index of the subject's last token, for the occurrence at or after character `from_char`."""
    occurrence = text[:from_char].count(subject)
    return find_subject_range(tok, text, subject, occurrence)[1] - 1


def contexts(lm, request: EditRequest, hp) -> list[tuple[str, int]]:
    """(text, char offset of the prompt) for each context template applied to the rewrite prompt."""
    out = []
    for tmpl in context_templates(lm, hp.context_templates, hp.context_length):
        prefix = tmpl.split("{}")[0]
        out.append((prefix + request.rewrite, len(prefix)))
    return out


_KEYS: contextvars.ContextVar = contextvars.ContextVar("editkit_keys_memo", default=None)


@contextmanager
def reuse_keys():
    """Keep the keys keys_at reads in this context (module docstring); yields the memo (a dict)."""
    if _KEYS.get() is not None:  # nested: the outer memo serves
        yield _KEYS.get()
        return
    token = _KEYS.set({})
    try:
        yield _KEYS.get()
    finally:
        _KEYS.reset(token)


def _memo_key(lm, layer: int, texts, subject: str) -> tuple:
    from ..model.weights import fingerprint

    return fingerprint(lm), layer, tuple((t, c) for t, c in texts), subject


@torch.no_grad()
def _read_keys(lm, layers: list[int], texts: list[tuple[str, int]], subject: str) -> dict[int, torch.Tensor]:
    """{layer: down-projection inputs (len(texts), d_ff) at the subject's last token}, in one run stopped at the
    last layer needed."""
    rows = [lm.tok(t, add_special_tokens=True)["input_ids"] for t, _ in texts]
    idx = torch.tensor([subject_last(lm.tok, t, subject, c) for t, c in texts])
    ids, mask = pad_right(rows, lm.tok.pad_token_id, lm.device)
    keys = [Site("mlp_key", l) for l in layers]
    got = lm.runner.read(keys, input_ids=ids, attention_mask=mask)
    return {k.layer: got[k.name][torch.arange(len(rows)), idx].float() for k in keys}


def keys_at(lm, layer: int, texts: list[tuple[str, int]], subject: str) -> torch.Tensor:
    """Down-projection inputs (len(texts), d_ff) at the subject's last token of each text."""
    memo = _KEYS.get()
    if memo is None:
        return _read_keys(lm, [layer], texts, subject)[layer]
    key = _memo_key(lm, layer, texts, subject)
    if key not in memo:
        memo[key] = _read_keys(lm, [layer], texts, subject)[layer]
    return memo[key].clone()


def prefetch_keys(lm, layers: list[int], request: EditRequest, hp) -> None:
    """Inside reuse_keys(): the keys ROME reads for `request` (k* over the context templates, and the bare rewrite
    prompt's) at every layer of `layers`, in one run each, for the edits at those layers that follow."""
    memo = _KEYS.get()
    if memo is None:
        return
    for texts in (contexts(lm, request, hp), [(request.rewrite, 0)]):
        todo = [l for l in layers if _memo_key(lm, l, texts, request.subject) not in memo]
        if todo:
            for l, k in _read_keys(lm, todo, texts, request.subject).items():
                memo[_memo_key(lm, l, texts, request.subject)] = k


def key_star(lm, layer: int, request: EditRequest, hp) -> torch.Tensor:
    """k*: the template-averaged key (d_ff,)."""
    return keys_at(lm, layer, contexts(lm, request, hp), request.subject).mean(0)


@torch.no_grad()
def site_output(lm, kind: str, layer: int, request: EditRequest) -> torch.Tensor:
    """The site's tensor at the subject's last token of the plain rewrite prompt (d_model,)."""
    text = request.rewrite
    idx = subject_last(lm.tok, text, request.subject, 0)
    ids = lm.tok(text, return_tensors="pt", add_special_tokens=True)["input_ids"].to(lm.device)
    where = site(kind, layer)
    return lm.runner.read([where], input_ids=ids)[where.name][0, idx].float()


class SiteReader:
    """Site values at the subject's last token for a batch of requests, read repeatedly while edits are being
    applied layer after layer (MEMIT's spreading, editing/spread.py).

    The rows are every request's context-template rows (`contexts`), tokenized once. The first `read` runs them
    through the body (stopping once the last site needed is computed) and records how each block was called. A
    read may `resume_at` a layer l: the residual entering block l is kept, and the next read starts there, running
    only blocks l.. on the kept residuals. That is exact when every edit applied in between is at layer l or later
    (an edit at layer l changes nothing before block l's output), which is how the spreading proceeds: it reads,
    edits layer l, reads again from l. A read that needs a site below the kept layer runs the whole body again."""

    def __init__(self, lm, requests: list[EditRequest], hp):
        self.lm, self.n = lm, len(requests)
        texts, owner = [], []
        for j, request in enumerate(requests):
            for text, offset in contexts(lm, request, hp):
                texts.append((text, offset, request.subject))
                owner.append(j)
        rows = [lm.tok(t, add_special_tokens=True)["input_ids"] for t, _, _ in texts]
        self.idx = torch.tensor([subject_last(lm.tok, t, subj, c) for t, c, subj in texts])
        self.ids, self.mask = pad_right(rows, lm.tok.pad_token_id, lm.device)
        self.rows_t, self.owner_t = torch.arange(len(rows)), torch.tensor(owner)
        self.counts = torch.bincount(self.owner_t, minlength=self.n)[:, None]
        self.plain_t = torch.tensor([owner.index(j) for j in range(self.n)])  # the "{}" row of each request
        self._kept: tuple[int, torch.Tensor] | None = None  # (layer l, residual entering block l)
        self._calls = None

    @torch.no_grad()
    def read(self, averaged: dict, plain: dict, resume_at: int | None = None) -> dict:
        """`averaged` {name: site}: the mean over each request's template rows (ROME's k*, MEMIT's K); `plain`
        {name: site}: the value on the bare rewrite prompt (the "{}" template). Returns {name: (width, n)}.
        `resume_at` l: keep the residual entering block l, so that the next read can start there."""
        lm = self.lm
        wanted = {name: parse(s) for name, s in {**averaged, **plain}.items()}
        if resume_at is not None:
            wanted["__keep"] = Site("resid_pre", resume_at)
        layers = [s.layer for s in wanted.values()]
        if any(l is None for l in layers):
            raise EditkitError("SiteReader reads per-layer sites only")
        last = max(layers)
        kept = self._kept
        # block-level runs and recorded calls: below the runner's `read`, so the hooks are paired by hand here
        with Hooks(lm) as hooks:
            got = hooks.capture(wanted)
            if kept is not None and kept[0] <= min(layers):
                lm.runner.run_blocks(kept[1], kept[0], self._calls, stop=last + 1)
            else:
                out = lm.runner.forward(input_ids=self.ids, attention_mask=self.mask,
                                        stop_after=Site("resid_post", last), calls=True)
                self._calls = out.calls
        self._kept = (resume_at, got.pop("__keep")) if resume_at is not None else None
        out = {}
        for name in averaged:
            x = got[name][self.rows_t, self.idx].float()
            mean = torch.zeros(self.n, x.shape[1], device=x.device).index_add(0, self.owner_t.to(x.device), x)
            out[name] = (mean / self.counts.to(x.device)).T.contiguous()
        for name in plain:
            out[name] = got[name][self.plain_t, self.idx[self.plain_t]].float().T.contiguous()
        return out


def read_sites(lm, requests: list[EditRequest], hp, averaged: dict, plain: dict) -> dict:
    """Site values at the subject's last token for all requests, in one batched forward over every request's
    context-template rows that stops once the last site needed is computed (see SiteReader.read)."""
    return SiteReader(lm, requests, hp).read(averaged, plain)
