"""Target vectors found by gradient descent: what every editing method writes (the "compute_v" half of
kmeng01/rome; the keys, its "compute_u" half, are in keys.py).

Targets (ROME Eq. 4; MEMIT Eq. 16; PMET Eq. 10): free vectors delta_site are added to the output of one or more
"sites" (the MLP output for ROME, the block output (residual) for MEMIT and AlphaEdit, the attention and MLP outputs
for PMET) at the subject's last token of every prompt, and optimized with Adam to minimize
    NLL(target_new | context + prompt)                       (averaged over templates and target tokens)
  + kl_factor * KL(P_orig || P_delta) on "{subject} is a"   (at the subject's last token, as upstream)
  + v_weight_decay * ||delta|| / ||init||^2,
with ||delta|| clamped to clamp_norm_factor * ||init|| after each step and early stopping (loss < 5e-2; PMET: once the
target is the argmax at every target position, the NLL weight drops to 0.1 and it stops when KL <= 0.01, App. D).
Stabilisers (ENCORE, arXiv 2502.01636; off unless chosen, `_stabiliser_stops`): stop once the target is the most
probable token (v_stop_top1), once its mean probability passes v_stop_prob, or once the loss stalls
(v_stop_stall); and bound ||delta|| = ||v* - v|| by v_max_norm after every step (editkit's shift bound, not
ENCORE's: its norm constraint acts on the weight update, MEMIT's update_norm_lambda).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.errors import EditkitError
from ..model.hooks import Hooks
from ..model.runner import vocab_logsumexp
from ..model.scoring import target_ids
from ..model.sites import Site, site
from ..model.tokens import pad_right
from .keys import contexts, subject_last
from .memo import memoized, missing_alone, remember_alone
from .requests import EditRequest

# --- target optimisation -------------------------------------------------------------------------------------
#
# Speed. Every row is [prefix | suffix] where the suffix starts at the subject's last token, the position where the
# deltas are added. Nothing in the prefix depends on the deltas, and neither does anything below `layer`, so the
# rows are run once: the prefix fills a key/value cache, the suffix is run on top of it, and the arguments every
# block >= `layer` receives (masks, rotary embeddings, the cache) and the residual entering block `layer` are kept.
# Each optimisation step then runs only blocks layer..N-1 on the suffix tokens (a few per row instead of ~20),
# each step continuing from a fresh copy of the prefix keys/values. `_Rows.logits(reference=True)` runs the
# plain full model on the same rows instead; tests check the two agree. Several requests are optimized in one
# batch: their losses are summed, so each request's gradient is that of its own loss, and Adam works
# elementwise, which makes this the same as optimizing them one by one; a request that meets its stopping rule
# is frozen (its rows keep being computed with its final delta) and the rows are rebuilt for the rest once
# half the batch has stopped.
#
# Requests may be optimized at different layers in one batch (a layer sweep: one request at every layer). A group's
# rows are then ordered by layer and stepped block by block (runner.step): at block j the rows of requests at layers
# <= j run, the rows of layer j joining with their residual entering block j, so each row runs only its own blocks
# and every block runs one larger batch instead of one small one per layer.


# A block's matmul costs about as much for one token as for ~30 (reading the weights dominates on a CPU), then
# grows with the tokens: cost(group) ~ _FIXED_TOKENS + rows * longest suffix.
_FIXED_TOKENS = 32
SHARE_ROWS = True  # _Rows runs identical rows once (a layer sweep's); False: each row on its own (the tests' reference)
SHARE_MIN_POSITIONS = 16  # ... when the shared run keeps at least this many rows x positions (_prepare_group)


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

    def __init__(self, lm, requests: list[EditRequest], layers: int | list[int], sites: tuple[str, ...], hp):
        tok = lm.tok
        layers = [layers] * len(requests) if isinstance(layers, int) else list(layers)
        self.lm, self.layers, self.sites = lm, layers, sites  # one layer per request
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
                self.subj.append(subject_last(tok, text, request.subject, offset))
                self.req.append(j)
                for m, t in enumerate(t_ids):
                    self.t_row.append(r)
                    self.t_pos.append(len(p_ids) - 1 + m)
                    self.t_tok.append(t)
                    self.t_req.append(j)
            kl_text = f"{request.subject} is a"
            kl_subj = subject_last(tok, kl_text, request.subject, 0)
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
        self.t_row_t = torch.tensor(self.t_row, device=dev)
        self.t_share = torch.tensor([1.0 / self.n_tok[j] for j in self.t_req], device=dev)  # mean over tokens
        self.first_row = [self.req.index(j) for j in range(len(requests))]  # the plain "{}" template row
        self._prepared = False

    # -- the fast path ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self) -> None:
        """Run the rows once, in groups of similar suffix length (`_merge_groups`: little padding in the suffix,
        where the steps spend their time), keeping each group's prefix cache, block arguments and the residual
        entering each row's block `layer` (a group's rows in layer order)."""
        dev = self.lm.device
        by_len: dict[int, list[int]] = {}
        for i, (r, s) in enumerate(zip(self.ids, self.subj)):
            by_len.setdefault(len(r) - s, []).append(i)
        self._groups = [self._prepare_group(sorted(rows, key=lambda i: self.layers[self.req[i]]))
                        for rows in _merge_groups(by_len)]
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
        pad = lm.tok.pad_token_id
        # Rows with the same tokens and subject position (a layer sweep: one request at every layer) are run once
        # and their states repeated: the prefix cache, the block arguments and the residuals entering each block.
        first: dict = {}
        slot = [first.setdefault((tuple(self.ids[i]), self.subj[i]), len(first)) for i in rows]
        prefix_len = max(s for _, s in first)
        suffix_len = max(len(r) - s for r, s in first)
        # only on the CPU and where the shared runs' matmuls keep at least SHARE_MIN_POSITIONS rows: MKL's float32
        # matmul gives a row the same bits in a batch of 12 or more rows as in a larger one, not in a batch of 1-3,
        # 5-7 or 9-11 (measured on this CPU), and the optimisation must not change by a bit (Adam turns one into
        # 0.1-0.4); a GPU's kernels were not measured, so a GPU runs every row as before
        shared = SHARE_ROWS and dev.type == "cpu" and len(first) < len(rows) and \
            len(first) * suffix_len >= SHARE_MIN_POSITIONS and \
            (prefix_len == 0 or len(first) * prefix_len >= SHARE_MIN_POSITIONS)
        unique = list(first) if shared else [(self.ids[i], self.subj[i]) for i in rows]
        ids = [list(r) for r, _ in unique]
        subj = [s for _, s in unique]
        B, P, S = len(ids), max(subj), max(len(r) - s for r, s in zip(ids, subj))
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
        row_layers = [self.layers[self.req[i]] for i in rows]
        entries = {l: Site("resid_pre", l) for l in sorted(set(row_layers))}
        with Hooks(lm) as hooks:
            h = hooks.capture(list(entries.values()))
            calls = lm.runner.forward(input_ids=suffix.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                                      kv=kv, calls=True).calls
        if shared:
            index = torch.tensor(slot, device=dev)
            kv = kv.rows(index) if kv is not None else None
            h = {name: t.index_select(0, index) for name, t in h.items()}
            calls = [None if c is None else _rows_of(c, index, B) for c in calls]
        # rows [start, end) of the group enter at block l (the rows are in layer order)
        joins = {l: (row_layers.index(l), len(row_layers) - row_layers[::-1].index(l)) for l in entries}
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
        return {"rows": torch.tensor(rows, device=dev), "calls": calls, "kv": kv, "scored": scored,
                "joins": {l: (a, b, h[e.name][a:b]) for (l, e), (a, b) in zip(entries.items(), joins.values())},
                "sel_row": torch.tensor(sel_row, device=dev), "sel_col": torch.tensor(sel_col, device=dev)}

    def logits(self, deltas: dict[str, torch.Tensor], init: dict | None = None, reference: bool = False):
        """Logits at every scored target token (T, V) and at the subject's last token of each KL row (n, V), with
        deltas[site][j] (n_requests, d_model) added to the site's output at the subject's last token of request
        j's rows. `init` (if given) receives each site's unchanged output on request j's plain-template row."""
        if reference:
            return self._reference_logits(deltas, init)
        logits = self.lm.runner.logits(self.states(deltas, init), norm=False)
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
            rows = g["rows"].tolist()
            with Hooks(self.lm) as hooks:
                for l, (a, b, _) in g["joins"].items():  # each layer's rows get their deltas in its block
                    for s in self.sites:
                        def add(h, s=s, a=a, b=b):
                            for i in range(a, b):
                                if rows[i] in self.first_row:
                                    seen[s][rows[i]] = h[i, 0].detach().float().clone()
                            h = h.clone()
                            h[a:b, 0] = h[a:b, 0] + deltas[s][req[a:b]].to(h.dtype)
                            return h
                        hooks.set(site(s, l), add)
                h = self._run(g)
            parts.append(h[g["sel_row"], g["sel_col"]])
        if init is not None:
            for s in self.sites:
                init[s] = torch.stack([seen[s][r] for r in self.first_row])
        return self.lm.adapter.final_norm(torch.cat(parts)[self._order])

    def _run(self, g: dict) -> torch.Tensor:
        """The group's residuals after the last block: one run from its layer, or, for rows at several layers,
        block by block with each layer's rows joining at their block (runner.step, per-row keys and values)."""
        run = self.lm.runner
        if len(g["joins"]) == 1:
            [(l, (_, _, h))] = g["joins"].items()
            return run.run_blocks(h, l, g["calls"], kv=g["kv"])
        h, first = None, min(g["joins"])
        for j in range(first, self.lm.adapter.n_layers):
            if j in g["joins"]:
                h_new = g["joins"][j][2]
                h = h_new if h is None else torch.cat([h, h_new])
            n, kv = h.shape[0], g["kv"]
            calls = list(g["calls"])
            calls[j] = _first_rows(calls[j], n, len(g["rows"]))
            h = run.step(h, j, calls, None if kv is None else (kv.keys[j][:n], kv.values[j][:n]))
        return h

    # -- the straightforward path (tests) ----------------------------------------------------------------------
    def _reference_logits(self, deltas, init):
        lm = self.lm
        ids, mask = pad_right(self.ids, lm.tok.pad_token_id, lm.device)
        rows = torch.arange(len(self.ids), device=lm.device)
        subj = torch.tensor(self.subj, device=lm.device)

        layer_t = torch.tensor([self.layers[j] for j in self.req], device=lm.device)
        first = torch.tensor(self.first_row, device=lm.device)

        def add_deltas(hooks):
            for l in sorted(set(self.layers)):
                at = (layer_t == l).nonzero()[:, 0]  # the rows of requests at layer l
                for s in self.sites:
                    def add(h, s=s, at=at, l=l):
                        if init is not None:
                            mine = [k for k, r in enumerate(self.first_row) if self.layers[self.req[r]] == l]
                            width = (len(self.first_row), h.shape[-1])
                            got = init.setdefault(s, torch.zeros(width, device=h.device))
                            got[mine] = h[first[mine], subj[first[mine]]].detach().float().clone()
                        h = h.clone()
                        h[rows[at], subj[at]] = h[rows[at], subj[at]] + deltas[s][self.req_t[at]].to(h.dtype)
                        return h
                    hooks.set(site(s, l), add)

        h = lm.runner.read({}, full=True, edit=add_deltas, input_ids=ids, attention_mask=mask).hidden
        rw = lm.runner.logits(h[torch.tensor(self.t_row), torch.tensor(self.t_pos)], norm=False)
        kl = lm.runner.logits(h[self.kl_rows, subj[self.kl_rows]], norm=False)
        return rw, kl


def _rows_of(call: tuple, index: torch.Tensor, batch: int) -> tuple:
    """A recorded block call (args, kwargs) of `batch` rows for the rows `index` (repeats allowed): every per-row
    tensor (two or more dimensions, the batch first, as _first_rows) indexed; the rest as recorded."""
    def pick(v):
        if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[0] == batch:
            return v.index_select(0, index)
        if isinstance(v, tuple):
            return tuple(pick(x) for x in v)
        return v
    args, kwargs = call
    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}


def _first_rows(call: tuple, n: int, batch: int) -> tuple:
    """A recorded block call (args, kwargs) for the first n of its `batch` rows: every per-row tensor (two or more
    dimensions, the batch first: masks, positions, rotary embeddings) cut to n rows; the rest as recorded."""
    def cut(v):
        if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[0] == batch:
            return v[:n]
        if isinstance(v, tuple):
            return tuple(cut(x) for x in v)
        return v
    args, kwargs = call
    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


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
                         _split(lm.runner.logits(x, norm=False), len(rows.t_row)))
        tok_logp = torch.log_softmax(rw, -1).gather(1, rows.t_tok_t[:, None])[:, 0]
        kl_logp = torch.log_softmax(kl_logits, -1)
        if "logp" not in kl0:
            kl0["logp"] = kl_logp.detach().clone()
        ref = kl0["logp"][act]
        return tok_logp, rw.argmax(-1), (ref.exp() * (ref - kl_logp)).sum(-1)
    (lse, mean_w, best), x = fused, x.float()
    T = len(rows.t_row)
    W, bias = lm.runner._head_weight()  # as this context sees it, the weight vocab_logsumexp used
    tok_logp = (x[:T] * W[rows.t_tok_t]).sum(-1) - lse[:T]
    if bias is not None:
        tok_logp = tok_logp + bias[rows.t_tok_t]
    x_kl, lse_kl = x[T:], lse[T:]
    if "mean" not in kl0:
        kl0["mean"] = mean_w[T:].detach().clone()
        kl0["neg_entropy"] = ((x_kl * kl0["mean"]).sum(-1) - lse_kl).detach()
    kl = kl0["neg_entropy"][act] - (x_kl * kl0["mean"][act]).sum(-1) + lse_kl
    return tok_logp, best[:T], kl


def _stabiliser_stops(hp, rows: _Rows, batch: list[int], tok_logp: torch.Tensor, argmax: torch.Tensor,
                      loss: torch.Tensor, tracker: dict) -> torch.Tensor | None:
    """Which requests of the batch the stabilisers stop at this step (None when none is on, so that the
    optimisation is the plain one, bit for bit). ENCORE (Gupta et al. 2025, encore/compute_z.py):
    - v_stop_top1 = n: stop at the n-th step (counted per request, not necessarily consecutive) at which the new
      target is the argmax at every target position of every template ("most-probable early stopping");
    - v_stop_prob = p: stop once mean_templates exp(-mean_tokens NLL) > p (the mean probability of the target);
    and v_stop_stall = r: stop once a step lowers the loss by less than r x the previous loss.
    `tracker` keeps the per-request counts and losses across steps (indexed by the request, not its batch place)
    and, in tracker["why"], the rule that stopped each batch position."""
    if not (hp.v_stop_top1 > 0 or hp.v_stop_prob > 0 or hp.v_stop_stall > 0):
        return None
    dev = loss.device
    n = len(batch)
    act = torch.tensor(batch, device=dev)
    stop = torch.zeros(n, dtype=torch.bool, device=dev)
    why = [""] * n
    if hp.v_stop_top1 > 0:
        miss = (argmax != rows.t_tok_t).float()
        all_hit = torch.zeros(n, device=dev).index_add(0, rows.t_req_t, miss) == 0
        tracker["top1"][act] += all_hit.long()
        hit = tracker["top1"][act] >= hp.v_stop_top1
        why = ["top1" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    if hp.v_stop_prob > 0:
        row_nll = torch.zeros(len(rows.ids), device=dev).index_add(0, rows.t_row_t, -tok_logp * rows.t_share)
        tmpl = sorted(set(rows.t_row))  # the template rows (every row but the KL rows)
        per_row = torch.exp(-row_nll[tmpl])
        req = rows.req_t[tmpl]
        n_rw = torch.tensor(rows.n_rw, device=dev, dtype=per_row.dtype)
        p_mean = torch.zeros(n, device=dev).index_add(0, req, per_row / n_rw[req])
        hit = p_mean > hp.v_stop_prob
        why = ["prob" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    if hp.v_stop_stall > 0:
        prev = tracker["prev"]
        hit = torch.tensor([j in prev and prev[j] - float(l) < hp.v_stop_stall * prev[j]
                            for j, l in zip(batch, loss.tolist())], device=dev)
        for j, l in zip(batch, loss.tolist()):
            prev[j] = float(l)
        why = ["stall" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    tracker["why"] = why
    return stop


@dataclass(frozen=True)
class Joint:
    """Requests that share target deltas (co-edit's joint targets: a fact and its implications about the same
    subject, written where the same subject's keys are; separate deltas at nearly equal keys would be averaged by
    the least-squares solve, each halved). tie[j]: the request whose delta j shares (tie[k] = k for each owner);
    weights[j]: j's weight in that delta's summed loss (None: 1 each; a stopping rule reads its unweighted loss);
    holds[j]: whether j's stopping rule must hold before its group stops (None: every member's; an owner's always
    does). A member that does not hold pulls on the delta while it runs but never keeps it running (co-edit's kept
    relations: one the new fact pulls against may never reach its rule)."""
    tie: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    holds: tuple[bool, ...] | None = None

    def check(self, layers: list[int]) -> None:
        n, tie = len(layers), self.tie
        if len(tie) != n or any(not 0 <= k < n or tie[k] != k or layers[k] != layers[j] for j, k in enumerate(tie)):
            raise EditkitError("tie: one owner per request, an owner ties to itself, both at the same layer")
        if self.weights is not None and (len(self.weights) != n or any(not w >= 0 for w in self.weights)):
            raise EditkitError("weights: one non-negative weight per request")
        if self.holds is not None and (len(self.holds) != n or not all(self.holds[k] for k in set(tie))):
            raise EditkitError("holds: one flag per request, and every owner's stopping rule holds its group")

    def key(self) -> list:
        """What a target memo key holds of it (editing/memo.py)."""
        return [list(self.tie)] + ([["weights", *self.weights]] if self.weights else []) + \
            ([["holds", *self.holds]] if self.holds and not all(self.holds) else [])


class _Tie:
    """A Joint during one optimisation: a shared delta is optimized on the sum of its requests' (weighted) losses:
    its gradient is the sum of theirs, every member gets the same Adam step (same state, same gradient, so the
    copies stay equal), the norm clamp is the owner's, and the group stops once each member that holds its stop
    has met its stopping rule."""

    def __init__(self, joint: Joint | None, layers: list[int], n: int, dev):
        tie = joint.tie if joint is not None else tuple(range(n))
        if joint is not None:
            joint.check(layers)
        self.on = any(k != j for j, k in enumerate(tie))
        self.tie = list(tie)
        self.tie_t = torch.tensor(self.tie, device=dev)
        self.weight = torch.tensor(joint.weights if joint and joint.weights else [1.0] * n, device=dev)
        self.holds = torch.tensor(joint.holds if joint and joint.holds else [True] * n, device=dev)
        self._batch, self._at = None, None  # the batch positions of the last batch asked (it changes rarely)

    def owner(self, rows: torch.Tensor) -> torch.Tensor:
        return self.tie_t[rows] if self.on else rows

    def _pos(self, batch: list[int]) -> torch.Tensor:
        """Each batch position's owner's position (members stop together: an owner is in every batch of theirs)."""
        if batch != self._batch:
            place = {j: i for i, j in enumerate(batch)}
            self._batch = list(batch)
            self._at = torch.tensor([place[self.tie[j]] for j in batch], device=self.tie_t.device)
        return self._at

    def all_done(self, batch: list[int], act: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        if not self.on:
            return done
        pos = self._pos(batch)
        left = torch.zeros(len(batch), device=done.device).index_add(0, pos, (~done & self.holds[act]).float())
        return left[pos] == 0

    def gradient(self, batch: list[int], g: torch.Tensor) -> torch.Tensor:
        if not self.on:
            return g
        pos = self._pos(batch)
        return torch.zeros_like(g).index_add(0, pos, g)[pos]


def _split(logits: torch.Tensor, T: int):
    return logits[:T], logits[T:]


@memoized  # only inside memo.reuse_targets() (sweeps): an identical optimisation is reused, not recomputed
def optimize_targets_batch(lm, requests: list[EditRequest], layer: int | list[int], sites: tuple[str, ...], hp,
                           adaptive: bool = False, progress=None, reference: bool = False,
                           joint: Joint | None = None) -> list[dict]:
    """Optimize one delta per site and request at `layer` (or at layer[j] for request j: a layer sweep in one
    batch); for each request returns {site: {"init", "delta", "target"}, "losses": [...]} (see the module docstring
    for the loss). `reference` runs the plain full model at every step instead of the cached fast path (same
    result; for benchmarks). `joint`: requests that share one delta, optimized on their summed losses (Joint)."""
    n, d, dev = len(requests), lm.adapter.d_model, lm.device
    layers = list(layer) if isinstance(layer, (list, tuple)) else [layer] * n
    if len(layers) != n:
        raise EditkitError("give one layer, or one layer per request")
    tied = _Tie(joint, layers, n, dev)
    delta = {s: torch.zeros(n, d, device=dev) for s in sites}
    adam = {s: {"m": torch.zeros(n, d, device=dev), "v": torch.zeros(n, d, device=dev)} for s in sites}
    init: dict[str, torch.Tensor] = {}
    kl_init: dict = {}  # the original distribution of each request's KL row, from the first step
    losses: list[list[dict]] = [[] for _ in range(n)]
    batch = list(range(n))  # the requests whose rows are prepared
    rows = _Rows(lm, requests, layers, sites, hp)
    running = torch.ones(n, dtype=torch.bool, device=dev)  # per batch position: still optimizing
    nll_factor = hp.nll_loss_factor
    steps = hp.v_num_grad_steps
    tracker = {"top1": torch.zeros(n, dtype=torch.long, device=dev), "prev": {}, "why": []}
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
            stop = _stabiliser_stops(hp, rows, batch, tok_logp.detach(), argmax, loss.detach(), tracker)
            if stop is not None:
                done = done | stop
            done = tied.all_done(batch, act, done)
            for i, j in enumerate(batch):
                if not running[i]:
                    continue  # stopped earlier; its rows are still computed until the batch is rebuilt
                losses[j].append({"step": step, "loss": loss[i].item(), "nll": nll[i].item(), "kl": kl[i].item(),
                                  "p_target": float(torch.exp(-nll[i].detach() * rows.n_tok[i]))})
                if stop is not None and bool(stop[i]):
                    losses[j][-1]["stopped_by"] = tracker["why"][i]
            if step == steps - 1:
                break
            keep = running & ~done
            if not bool(keep.any()):
                break
            (loss * keep * tied.weight[act]).sum().backward()
        with torch.no_grad():
            for s in sites:
                rows_k = act[keep]
                p = d_act[s].detach()[keep]
                g = tied.gradient(batch, d_act[s].grad)[keep]
                st = {"m": adam[s]["m"][rows_k], "v": adam[s]["v"][rows_k]}
                _adam(p, g, st, hp.v_lr, step + 1)
                adam[s]["m"][rows_k], adam[s]["v"][rows_k] = st["m"], st["v"]
                limit = hp.clamp_norm_factor * init[s][tied.owner(rows_k)].norm(dim=1, keepdim=True)
                norm = p.norm(dim=1, keepdim=True)
                p = torch.where(norm > limit, p * limit / norm, p)  # MEMIT/ROME's norm clamp
                if hp.v_max_norm > 0:  # the shift bound, in model units
                    norm = p.norm(dim=1, keepdim=True)
                    p = torch.where(norm > hp.v_max_norm, p * hp.v_max_norm / norm, p)
                delta[s][rows_k] = p
        running = keep
        if int(running.sum()) <= len(batch) // 2:  # rebuild the rows for the rest once half have stopped
            batch = [j for i, j in enumerate(batch) if bool(running[i])]
            rows = _Rows(lm, [requests[j] for j in batch], [layers[j] for j in batch], sites, hp)
            running = torch.ones(len(batch), dtype=torch.bool, device=dev)
    out = []
    for j in range(n):
        res = {"losses": losses[j]}
        for s in sites:
            res[s] = {"init": init[s][j], "delta": delta[s][j].clone(), "target": init[s][j] + delta[s][j]}
        if hp.v_max_norm > 0:  # the shift bound held this target short (a bound on the wrong scale holds them all)
            res["held_at_bound"] = any(float(delta[s][j].norm()) >= hp.v_max_norm * (1 - 1e-6) for s in sites)
        out.append(res)
    return out


def stabiliser_details(opt: dict) -> dict:
    """A request's stabiliser diagnostics from its optimized targets (RequestReport.details): NAS's rescaling
    (anchor.py), and whether the shift bound held the target short."""
    return {k: opt[k] for k in ("nas", "held_at_bound") if k in opt}


def optimize_targets(lm, request: EditRequest, layer: int, sites: tuple[str, ...], hp,
                     adaptive: bool = False, progress=None, reference: bool = False) -> dict:
    """One request's deltas (see optimize_targets_batch)."""
    return optimize_targets_batch(lm, [request], layer, sites, hp, adaptive, progress, reference)[0]


def optimize_layers(lm, request: EditRequest, layers: list[int], sites: tuple[str, ...], hp, adaptive: bool = False,
                    progress=None) -> int:
    """A layer sweep's targets: `request` at every layer of `layers`, optimized in one batch (the rows of each layer
    join at its block: module comment) and kept in the active memo (memo.reuse_targets) under each layer's
    one-request key, so the edits at each layer that follow reuse them instead of optimizing alone. Returns how
    many were optimized (0 outside reuse_targets(), or when every layer's targets were already known)."""
    todo = missing_alone(lm, [request] * len(layers), layers, sites, hp, adaptive)
    if not todo:
        return 0
    chosen = [layers[j] for j in todo]
    results = optimize_targets_batch.__wrapped__(lm, [request] * len(chosen), chosen, sites, hp, adaptive, progress)
    remember_alone(lm, [request] * len(chosen), chosen, sites, hp, adaptive, results)
    return len(chosen)
