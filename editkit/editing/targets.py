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
from ..runner import vocab_logsumexp
from ..scoring import target_ids
from ..sites import Site, parse, site
from ..text import find_subject_range
from .context import context_templates
from .memo import memoized
from .requests import EditRequest


def _subject_last(tok, text: str, subject: str, from_char: int) -> int:
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
    key = Site("mlp_key", layer)
    with Hooks(lm) as hooks:
        cache = hooks.capture([key])
        lm.runner.run_until(key, input_ids=ids, attention_mask=mask)
    return cache[key.name][torch.arange(len(rows)), torch.tensor(idx)].float()


def key_star(lm, layer: int, request: EditRequest, hp) -> torch.Tensor:
    """k*: the template-averaged key (d_ff,)."""
    return keys_at(lm, layer, contexts(lm, request, hp), request.subject).mean(0)


@torch.no_grad()
def site_output(lm, kind: str, layer: int, request: EditRequest) -> torch.Tensor:
    """The site's tensor at the subject's last token of the plain rewrite prompt (d_model,)."""
    text = request.rewrite
    idx = _subject_last(lm.tok, text, request.subject, 0)
    ids = lm.tok(text, return_tensors="pt", add_special_tokens=True)["input_ids"].to(lm.device)
    where = site(kind, layer)
    with Hooks(lm) as hooks:
        out = hooks.capture([where])
        lm.runner.run_until(where, input_ids=ids)
    return out[where.name][0, idx].float()


class SiteReader:
    """Site values at the subject's last token for a batch of requests, read repeatedly while edits are being
    applied layer after layer (MEMIT's spreading, editing/spread.py).

    The rows are every request's context-template rows (`contexts`), tokenized once. The first `read` runs them
    through the body (stopping once the last site needed is computed) and records how each block was called. A
    read may `keep` a layer l: the residual entering block l is kept, and the next read starts there, running only
    blocks l.. on the kept residuals. That is exact when every edit applied in between is at layer l or later
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
        self.idx = torch.tensor([_subject_last(lm.tok, t, subj, c) for t, c, subj in texts])
        self.ids, self.mask = _pad(lm, rows)
        self.rows_t, self.owner_t = torch.arange(len(rows)), torch.tensor(owner)
        self.counts = torch.bincount(self.owner_t, minlength=self.n)[:, None]
        self.plain_t = torch.tensor([owner.index(j) for j in range(self.n)])  # the "{}" row of each request
        self._kept: tuple[int, torch.Tensor] | None = None  # (layer l, residual entering block l)
        self._calls = None

    @torch.no_grad()
    def read(self, averaged: dict, plain: dict, keep: int | None = None) -> dict:
        """`averaged` {name: site}: the mean over each request's template rows (ROME's k*, MEMIT's K); `plain`
        {name: site}: the value on the bare rewrite prompt (the "{}" template). Returns {name: (width, n)}."""
        lm = self.lm
        wanted = {name: parse(s) for name, s in {**averaged, **plain}.items()}
        if keep is not None:
            wanted["__keep"] = Site("resid_pre", keep)
        layers = [s.layer for s in wanted.values()]
        if any(l is None for l in layers):
            raise EditkitError("SiteReader reads per-layer sites only")
        last = max(layers)
        kept = self._kept
        with Hooks(lm) as hooks:
            got = hooks.capture(wanted)
            if kept is not None and kept[0] <= min(layers):
                lm.runner.run_blocks(kept[1], kept[0], self._calls, stop=last + 1)
            else:
                out = lm.runner.forward(input_ids=self.ids, attention_mask=self.mask,
                                        stop_after=Site("resid_post", last), calls=True)
                self._calls = out.calls
        self._kept = (keep, got.pop("__keep")) if keep is not None else None
        out = {}
        for name in averaged:
            x = got[name][self.rows_t, self.idx].float()
            out[name] = (torch.zeros(self.n, x.shape[1]).index_add(0, self.owner_t, x) / self.counts).T.contiguous()
        for name in plain:
            out[name] = got[name][self.plain_t, self.idx[self.plain_t]].float().T.contiguous()
        return out


def read_sites(lm, requests: list[EditRequest], hp, averaged: dict, plain: dict) -> dict:
    """Site values at the subject's last token for all requests, in one batched forward over every request's
    context-template rows that stops once the last site needed is computed (see SiteReader.read)."""
    return SiteReader(lm, requests, hp).read(averaged, plain)


def layer_state(lm, requests: list[EditRequest], hp, layer: int, z_layer: int, kind: str,
                attn: bool = False) -> dict:
    """What MEMIT/PMET read at one critical layer: "K" (d_ff, n) the template-averaged keys at `layer` (= key_star
    per request), "current" (d_model, n) the site `kind` at z_layer and "mlp" (d_model, n) the MLP output at `layer`,
    both on the plain rewrite prompt. With `attn`, also "K_attn", the template-averaged inputs of W_O (site attn_z)
    at `layer`, and "current_attn", the attention output at z_layer (PMET's MHSA update)."""
    averaged = {"K": Site("mlp_key", layer), **({"K_attn": Site("attn_z", layer)} if attn else {})}
    plain = {"current": site(kind, z_layer), "mlp": Site("mlp_out", layer),
             **({"current_attn": Site("attn_out", z_layer)} if attn else {})}
    return read_sites(lm, requests, hp, averaged, plain)


# --- target optimisation -------------------------------------------------------------------------------------
#
# Speed. Every row is [prefix | suffix] where the suffix starts at the subject's last token, the position where the
# deltas are added. Nothing in the prefix depends on the deltas, and neither does anything below `layer`, so the
# rows are run once: the prefix fills a key/value cache, the suffix is run on top of it, and the arguments every
# block >= `layer` receives (masks, rotary embeddings, the cache) and the residual entering block `layer` are kept.
# Each optimisation step then runs only blocks layer..N-1 on the suffix tokens (a few per row instead of ~20),
# each step continuing from a fresh copy of the prefix keys/values. `_Rows.logits(reference=True)` runs the plain full model on
# the same rows instead; tests check the two agree. Several requests are optimized in one batch: their losses are
# summed, so each request's gradient is that of its own loss, and Adam works elementwise, which makes this the same
# as optimizing them one by one; a request that meets its stopping rule is frozen (its rows keep being computed
# with its final delta) and the rows are rebuilt for the rest once half the batch has stopped.


# A block's matmul costs about as much for one token as for ~30 (reading the weights dominates on a CPU), then
# grows with the tokens: cost(group) ~ _FIXED_TOKENS + rows * longest suffix.
_FIXED_TOKENS = 32


def _merge_groups(by_len: dict[int, list[int]]) -> list[list[int]]:
    """Partition rows, sorted by suffix length, into contiguous groups that minimise the sum over groups of
    _FIXED_TOKENS + rows x (longest suffix) (padding wastes work, every extra group re-reads the weights)."""
    lengths = sorted(by_len)
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        rows = 0
        for i in range(j, 0, -1):  # group = lengths[i-1 .. j-1]
            rows += len(by_len[lengths[i - 1]])
            cost = best[i - 1] + _FIXED_TOKENS + rows * lengths[j - 1]
            if cost < best[j]:
                best[j], cut[j] = cost, i - 1
    groups, j = [], n
    while j > 0:
        i = cut[j]
        groups.append([r for length in lengths[i:j] for r in by_len[length]])
        j = i
    return groups[::-1]


class _Rows:
    """The token rows of a batch of requests: for each request, one row per context template (prompt + target
    tokens but the last) and one row "{subject} is a" for the KL term."""

    def __init__(self, lm, requests: list[EditRequest], layer: int, sites: tuple[str, ...], hp):
        tok = lm.tok
        self.lm, self.layer, self.sites = lm, layer, sites
        self.ids, self.subj, self.req = [], [], []
        self.t_row, self.t_pos, self.t_tok, self.t_req = [], [], [], []  # one entry per target token to score
        self.n_rw, self.n_tok, self.kl_rows = [], [], []
        for j, request in enumerate(requests):
            t_ids = target_ids(tok, request.target_new)
            ctx = contexts(lm, request, hp)
            self.n_rw.append(len(ctx))
            self.n_tok.append(len(t_ids))
            for text, offset in ctx:
                p_ids = tok(text, add_special_tokens=True)["input_ids"]
                r = len(self.ids)
                self.ids.append(p_ids + t_ids[:-1])
                self.subj.append(_subject_last(tok, text, request.subject, offset))
                self.req.append(j)
                for m, t in enumerate(t_ids):
                    self.t_row.append(r)
                    self.t_pos.append(len(p_ids) - 1 + m)
                    self.t_tok.append(t)
                    self.t_req.append(j)
            kl_text = f"{request.subject} is a"
            kl_subj = _subject_last(tok, kl_text, request.subject, 0)
            self.kl_rows.append(len(self.ids))
            # the KL term reads the subject's last token, which never sees the tokens after it: cut them
            self.ids.append(tok(kl_text, add_special_tokens=True)["input_ids"][:kl_subj + 1])
            self.subj.append(kl_subj)
            self.req.append(j)
        dev = lm.device
        self.req_t = torch.tensor(self.req, device=dev)
        self.t_tok_t = torch.tensor(self.t_tok, device=dev)
        self.t_req_t = torch.tensor(self.t_req, device=dev)
        # weight of each target token in its request's NLL: mean over tokens, then over template rows
        self.t_weight = torch.tensor([1.0 / (self.n_tok[j] * self.n_rw[j]) for j in self.t_req], device=dev)
        self.first_row = [self.req.index(j) for j in range(len(requests))]  # the plain "{}" template row
        self._prepared = False

    # -- the fast path ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self) -> None:
        """Run the rows once, in groups of similar suffix length (`_merge_groups`: little padding in the suffix,
        where the steps spend their time), keeping each group's prefix cache, block arguments and the residual
        entering block `layer`."""
        dev = self.lm.device
        by_len: dict[int, list[int]] = {}
        for i, (r, s) in enumerate(zip(self.ids, self.subj)):
            by_len.setdefault(len(r) - s, []).append(i)
        self._groups = [self._prepare_group(rows) for rows in _merge_groups(by_len)]
        # where each scored vector sits in the concatenation of the groups' selections
        where = {}
        offset = 0
        for g in self._groups:
            for k, key in enumerate(g["scored"]):
                where[key] = offset + k
            offset += len(g["scored"])
        order = [where[("t", r, p)] for r, p in zip(self.t_row, self.t_pos)] + [where[("kl", r)] for r in self.kl_rows]
        self._order = torch.tensor(order, device=dev)
        self._prepared = True

    def _prepare_group(self, rows: list[int]) -> dict:
        lm, dev = self.lm, self.lm.device
        pad = lm.tok.pad_token_id if lm.tok.pad_token_id is not None else 0
        ids = [self.ids[i] for i in rows]
        subj = [self.subj[i] for i in rows]
        B, P, S = len(rows), max(subj), max(len(r) - s for r, s in zip(ids, subj))
        kv = None
        if P > 0:
            # Prefix, right-padded and unmasked: a real token never attends to the pads after it, and no query row
            # is ever fully masked (which would give NaN). The pads' cache entries are masked out below.
            prefix = torch.full((B, P), pad, dtype=torch.long)
            for i, (r, s) in enumerate(zip(ids, subj)):
                prefix[i, :s] = torch.tensor(r[:s], dtype=torch.long)
            kv = lm.runner.forward(input_ids=prefix.to(dev), keep_kv=True).kv
        suffix = torch.full((B, S), pad, dtype=torch.long)  # right-padded (pads come after every real token)
        mask = torch.zeros((B, P + S), dtype=torch.long)
        pos = torch.zeros((B, S), dtype=torch.long)
        for i, (r, s) in enumerate(zip(ids, subj)):
            suffix[i, :len(r) - s] = torch.tensor(r[s:], dtype=torch.long)
            mask[i, :s] = 1
            mask[i, P:P + len(r) - s] = 1
            pos[i] = s + torch.arange(S)
        entry = Site("resid_pre", self.layer)
        with Hooks(lm) as hooks:
            h = hooks.capture([entry])
            calls = lm.runner.forward(input_ids=suffix.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                                      kv=kv, calls=True).calls
        local = {r: i for i, r in enumerate(rows)}
        scored, sel_row, sel_col = [], [], []
        for r, p in zip(self.t_row, self.t_pos):
            if r in local:
                scored.append(("t", r, p))
                sel_row.append(local[r])
                sel_col.append(p - self.subj[r])
        for r in self.kl_rows:
            if r in local:
                scored.append(("kl", r))
                sel_row.append(local[r])
                sel_col.append(0)
        return {"rows": torch.tensor(rows, device=dev), "h_entry": h[entry.name], "calls": calls, "kv": kv,
                "scored": scored, "sel_row": torch.tensor(sel_row, device=dev),
                "sel_col": torch.tensor(sel_col, device=dev)}

    def logits(self, deltas: dict[str, torch.Tensor], init: dict | None = None, reference: bool = False):
        """Logits at every scored target token (T, V) and at the subject's last token of each KL row (n, V), with
        deltas[site][j] (n_requests, d_model) added to the site's output at the subject's last token of request
        j's rows. `init` (if given) receives each site's unchanged output on request j's plain-template row."""
        if reference:
            return self._reference_logits(deltas, init)
        logits = self.lm.adapter.unembed(self.states(deltas, init), norm=False).float()
        T = len(self.t_row)
        return logits[:T], logits[T:]

    def states(self, deltas: dict[str, torch.Tensor], init: dict | None = None) -> torch.Tensor:
        """The final-normed states (T + n, d_model) whose logits `logits` returns (scored target tokens, then the
        KL rows), by the fast path."""
        if not self._prepared:
            self._prepare()
        parts = []
        seen = {s: {} for s in self.sites}
        for g in self._groups:
            req = self.req_t[g["rows"]]
            with Hooks(self.lm) as hooks:
                for s in self.sites:
                    def add(h, s=s, g=g, req=req):
                        for i, r in enumerate(g["rows"].tolist()):
                            if r in self.first_row:
                                seen[s][r] = h[i, 0].detach().float().clone()
                        h = h.clone()
                        h[:, 0] = h[:, 0] + deltas[s][req].to(h.dtype)
                        return h
                    hooks.set(site(s, self.layer), add)
                h = self.lm.runner.run_blocks(g["h_entry"], self.layer, g["calls"], kv=g["kv"])
            parts.append(h[g["sel_row"], g["sel_col"]])
        if init is not None:
            for s in self.sites:
                init[s] = torch.stack([seen[s][r] for r in self.first_row])
        return self.lm.adapter.final_norm(torch.cat(parts)[self._order])

    # -- the straightforward path (tests) ----------------------------------------------------------------------
    def _reference_logits(self, deltas, init):
        lm, a = self.lm, self.lm.adapter
        ids, mask = _pad(lm, self.ids)
        rows = torch.arange(len(self.ids), device=lm.device)
        subj = torch.tensor(self.subj, device=lm.device)
        with Hooks(lm) as hooks:
            for s in self.sites:
                def add(h, s=s):
                    if init is not None and s not in init:
                        init[s] = h[self.first_row, subj[self.first_row]].detach().float().clone()
                    h = h.clone()
                    h[rows, subj] = h[rows, subj] + deltas[s][self.req_t].to(h.dtype)
                    return h
                hooks.set(site(s, self.layer), add)
            h = lm.runner.hidden(input_ids=ids, attention_mask=mask)
        rw = a.unembed(h[torch.tensor(self.t_row), torch.tensor(self.t_pos)], norm=False).float()
        kl = a.unembed(h[self.kl_rows, subj[self.kl_rows]], norm=False).float()
        return rw, kl


def _adam(p: torch.Tensor, g: torch.Tensor, state: dict, lr: float, t: int, b1=0.9, b2=0.999, eps=1e-8) -> None:
    """One step of Adam (torch.optim.Adam's defaults) on rows of p; elementwise, so rows are independent."""
    state["m"].mul_(b1).add_(g, alpha=1 - b1)
    state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
    p.sub_(lr * (state["m"] / (1 - b1 ** t)) / ((state["v"] / (1 - b2 ** t)).sqrt() + eps))


def _loss_terms(lm, rows: _Rows, deltas: dict, init: dict | None, reference: bool, kl0: dict, act: torch.Tensor):
    """The log-probability (T,) and argmax (T,) of every scored target token and, per request in `act`,
    KL(P_orig || P_delta) on its KL row (kl0 keeps P_orig from the first call, when every request is active).

    Fast path (a plain linear unembedding, logits W x + b): each loss term is lse(W x + b) minus an affine function
    of x, so one pass over the vocabulary gives the values and the gradient (runner.vocab_logsumexp, no (N, V)
    logits held):
        log p(t | x) = w_t . x + b_t - lse(W x + b)
        KL(P0 || P_x) = sum_v P0_v log P0_v - sum_v P0_v (w_v . x - lse(W x))
                      = [x0 . E_P0[w] - lse(W x0)] - x . E_P0[w] + lse(W x),
    with E_P0[w] and the bracket taken once from the first step's pass (x = x0; a bias adds E_P0[b] to both
    brackets, which cancels). The same numbers as the softmax over full logits (the `reference` path, and models
    with a softcap), up to rounding."""
    fused = None
    if not reference:
        x = rows.states(deltas, init)
        fused = vocab_logsumexp(lm, x.float())  # the loss in float32 whatever the model's dtype
    if fused is None:
        rw, kl_logits = (rows.logits(deltas, init, reference=True) if reference else
                         _split(lm.adapter.unembed(x, norm=False).float(), len(rows.t_row)))
        tok_logp = torch.log_softmax(rw, -1).gather(1, rows.t_tok_t[:, None])[:, 0]
        kl_logp = torch.log_softmax(kl_logits, -1)
        if "logp" not in kl0:
            kl0["logp"] = kl_logp.detach().clone()
        ref = kl0["logp"][act]
        return tok_logp, rw.argmax(-1), (ref.exp() * (ref - kl_logp)).sum(-1)
    (lse, mean_w, best), x = fused, x.float()
    T = len(rows.t_row)
    head = lm.adapter.unembed_module
    tok_logp = (x[:T] * head.weight[rows.t_tok_t]).sum(-1) - lse[:T]
    if head.bias is not None:
        tok_logp = tok_logp + head.bias[rows.t_tok_t]
    x_kl, lse_kl = x[T:], lse[T:]
    if "mean" not in kl0:
        kl0["mean"] = mean_w[T:].detach().clone()
        kl0["neg_entropy"] = ((x_kl * kl0["mean"]).sum(-1) - lse_kl).detach()
    kl = kl0["neg_entropy"][act] - (x_kl * kl0["mean"][act]).sum(-1) + lse_kl
    return tok_logp, best[:T], kl


def _split(logits: torch.Tensor, T: int):
    return logits[:T], logits[T:]


@memoized  # only inside memo.reuse_targets() (sweeps): an identical optimisation is reused, not recomputed
def optimize_targets_batch(lm, requests: list[EditRequest], layer: int, sites: tuple[str, ...], hp,
                           adaptive: bool = False, progress=None, reference: bool = False) -> list[dict]:
    """Optimize one delta per site and request at `layer`; for each request returns
    {site: {"init", "delta", "target"}, "losses": [...]} (see the module docstring for the loss). `reference` runs
    the plain full model at every step instead of the cached fast path (same result; for benchmarks)."""
    n, d, dev = len(requests), lm.adapter.d_model, lm.device
    delta = {s: torch.zeros(n, d, device=dev) for s in sites}
    adam = {s: {"m": torch.zeros(n, d, device=dev), "v": torch.zeros(n, d, device=dev)} for s in sites}
    init: dict[str, torch.Tensor] = {}
    kl_init: dict = {}  # the original distribution of each request's KL row, from the first step
    losses: list[list[dict]] = [[] for _ in range(n)]
    batch = list(range(n))  # the requests whose rows are prepared
    rows = _Rows(lm, requests, layer, sites, hp)
    running = torch.ones(n, dtype=torch.bool, device=dev)  # per batch position: still optimizing
    nll_factor = hp.nll_loss_factor
    steps = hp.v_num_grad_steps
    for step in range(steps):
        if progress:
            progress(step / steps, f"targets: step {step + 1}/{steps}, {int(running.sum())} request(s) left")
        act = torch.tensor(batch, device=dev)
        with torch.enable_grad():
            d_act = {s: delta[s][act].clone().requires_grad_(True) for s in sites}
            first = {} if not init else None
            tok_logp, argmax, kl = _loss_terms(lm, rows, d_act, first, reference, kl_init, act)
            if first is not None:
                init = first
            tok_nll = -tok_logp * rows.t_weight
            nll = torch.zeros(len(batch), device=dev).index_add(0, rows.t_req_t, tok_nll)  # per request
            decay = sum(d_act[s].norm(dim=1) / init[s][act].norm(dim=1) ** 2 for s in sites)
            w = torch.full((len(batch),), float(nll_factor), device=dev)
            done = torch.zeros(len(batch), dtype=torch.bool, device=dev)
            if adaptive:  # PMET App. D: once the target wins everywhere, lower the NLL weight; stop when KL is small
                hit = (argmax == rows.t_tok_t).float()
                all_hit = torch.zeros(len(batch), device=dev).index_add(0, rows.t_req_t, 1 - hit) == 0
                w = torch.where(all_hit, 0.1 * w, w)
                done = all_hit & (kl.detach() <= 0.01)
            loss = w * nll + hp.kl_factor * kl + hp.v_weight_decay * decay
            if not bool(torch.isfinite(loss).all()):
                raise EditkitError("the target optimisation diverged (loss is not finite); lower v_lr")
            if not adaptive:
                done = loss.detach() < hp.v_stop_loss  # upstream's early stop
            for i, j in enumerate(batch):
                if not running[i]:
                    continue  # stopped earlier; its rows are still computed until the batch is rebuilt
                losses[j].append({"step": step, "loss": loss[i].item(), "nll": nll[i].item(), "kl": kl[i].item(),
                                  "p_target": float(torch.exp(-nll[i].detach() * rows.n_tok[i]))})
            if step == steps - 1:
                break
            keep = running & ~done
            if not bool(keep.any()):
                break
            (loss * keep).sum().backward()
        with torch.no_grad():
            for s in sites:
                rows_k = act[keep]
                p = d_act[s].detach()[keep]
                g = d_act[s].grad[keep]
                st = {"m": adam[s]["m"][rows_k], "v": adam[s]["v"][rows_k]}
                _adam(p, g, st, hp.v_lr, step + 1)
                adam[s]["m"][rows_k], adam[s]["v"][rows_k] = st["m"], st["v"]
                limit = hp.clamp_norm_factor * init[s][rows_k].norm(dim=1, keepdim=True)
                norm = p.norm(dim=1, keepdim=True)
                p = torch.where(norm > limit, p * limit / norm, p)  # MEMIT/ROME's norm clamp
                delta[s][rows_k] = p
        running = keep
        if int(running.sum()) <= len(batch) // 2:  # rebuild the rows for the rest once half have stopped
            batch = [j for i, j in enumerate(batch) if bool(running[i])]
            rows = _Rows(lm, [requests[j] for j in batch], layer, sites, hp)
            running = torch.ones(len(batch), dtype=torch.bool, device=dev)
    out = []
    for j in range(n):
        res = {"losses": losses[j]}
        for s in sites:
            res[s] = {"init": init[s][j], "delta": delta[s][j].clone(), "target": init[s][j] + delta[s][j]}
        out.append(res)
    return out


def optimize_targets(lm, request: EditRequest, layer: int, sites: tuple[str, ...], hp,
                     adaptive: bool = False, progress=None, reference: bool = False) -> dict:
    """One request's deltas (see optimize_targets_batch)."""
    return optimize_targets_batch(lm, [request], layer, sites, hp, adaptive, progress, reference)[0]
