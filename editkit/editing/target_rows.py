"""The rows a target optimisation scores (targets.py), run once and then stepped from the edited layer up.

Every row is [prefix | suffix] where the suffix starts at the subject's last token, the position where the
deltas are added. Nothing in the prefix depends on the deltas, and neither does anything below `layer`, so the
rows are run once: the prefix fills a key/value cache, the suffix is run on top of it, and the arguments every
block >= `layer` receives (masks, rotary embeddings, the cache) and the residual entering block `layer` are
kept. Each optimisation step then runs only blocks layer..N-1 on the suffix tokens (a few per row instead of
~20), each step continuing from a fresh copy of the prefix keys/values. `TargetRows.logits(reference=True)`
runs the plain full model on the same rows instead; tests check the two agree.

Requests may be optimized at different layers in one batch (a layer sweep: one request at every layer). A
group's rows are then ordered by layer and stepped block by block (runner.step): at block j the rows of
requests at layers <= j run, the rows of layer j joining with their residual entering block j, so each row
runs only its own blocks and every block runs one larger batch instead of one small one per layer.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..model.hooks import Hooks
from ..model.kv import KV
from ..model.runner import BlockCalls
from ..model.scoring import target_ids
from ..model.sites import Site, site
from ..model.tokens import pad_right
from .keys import contexts, subject_last
from .requests import EditRequest

if TYPE_CHECKING:
    from ..model.lm import LM

# A block's matmul costs about as much for one token as for ~30 (reading the weights dominates on a CPU), then
# grows with the tokens: cost(group) ~ _FIXED_TOKENS + rows * longest suffix.
_FIXED_TOKENS = 32
# identical rows (a layer sweep's) run once (False: each row on its own, the tests' reference) when the
# shared run keeps at least SHARE_MIN_POSITIONS rows x positions (TargetRows._unique)
SHARE_ROWS = True
SHARE_MIN_POSITIONS = 16

Deltas = dict[str, torch.Tensor]  # site -> (n_requests, d_model) shifts added at the subject's last token


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


@dataclass
class _Group:
    """One group of rows, run once: how the model calls each block, the prefix keys/values, the residual
    entering each row's first edited block (per layer: rows [a, b) of the group and their residuals), and
    which of the group's outputs are scored (`scored`, at rows sel_row and suffix positions sel_col)."""

    rows: torch.Tensor
    calls: BlockCalls
    kv: KV | None
    scored: list[tuple[Any, ...]]
    joins: dict[int, tuple[int, int, torch.Tensor]]
    sel_row: torch.Tensor
    sel_col: torch.Tensor


class TargetRows:
    """The token rows of a batch of requests: for each request, one row per context template (prompt + target
    tokens but the last) and one row "{subject} is a" for the KL term."""

    def __init__(self, lm: LM, requests: list[EditRequest], layers: int | list[int], sites: tuple[str, ...],
                 hp: Any) -> None:
        layers = [layers] * len(requests) if isinstance(layers, int) else list(layers)
        self.lm, self.layers, self.sites = lm, layers, sites  # one layer per request
        self.ids: list[list[int]] = []
        self.subj: list[int] = []
        self.req: list[int] = []
        # one entry per target token to score: its row, position, token and request
        self.t_row: list[int] = []
        self.t_pos: list[int] = []
        self.t_tok: list[int] = []
        self.t_req: list[int] = []
        self.n_rw: list[int] = []
        self.n_tok: list[int] = []
        self.kl_rows: list[int] = []
        for j, request in enumerate(requests):
            self._add_request(j, request, hp)
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

    def _add_request(self, j: int, request: EditRequest, hp: Any) -> None:
        """Request j's rows: one per context template with its target tokens to score, then its KL row."""
        tok = self.lm.tok
        t_ids = target_ids(tok, request.target_new)
        ctx = contexts(self.lm, request, hp)
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

    # -- the fast path ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def _prepare(self) -> None:
        """Run the rows once, in groups of similar suffix length (`_merge_groups`: little padding in the
        suffix, where the steps spend their time), keeping each group's prefix cache, block arguments and the
        residual entering each row's block `layer` (a group's rows in layer order)."""
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
            for k, key in enumerate(g.scored):
                where[key] = offset + k
            offset += len(g.scored)
        order = [where[("t", r, p)] for r, p in zip(self.t_row, self.t_pos)] + \
            [where[("kl", r)] for r in self.kl_rows]
        self._order = torch.tensor(order, device=dev)
        self._prepared = True

    def _unique(self, rows: list[int]) -> tuple[bool, list[int], list[tuple[list[int], int]]]:
        """Whether the group runs its identical rows once (a layer sweep: one request at every layer), each
        row's slot among the rows run, and the rows run (tokens, subject position)."""
        first: dict[tuple[tuple[int, ...], int], int] = {}
        slot = [first.setdefault((tuple(self.ids[i]), self.subj[i]), len(first)) for i in rows]
        prefix_len = max(s for _, s in first)
        suffix_len = max(len(r) - s for r, s in first)
        # only on the CPU and where the shared runs' matmuls keep at least SHARE_MIN_POSITIONS rows: MKL's
        # float32 matmul gives a row the same bits in a batch of 12 or more rows as in a larger one, not in a
        # batch of 1-3, 5-7 or 9-11 (measured on this CPU), and the optimisation must not change by a bit
        # (Adam turns one into 0.1-0.4); a GPU's kernels were not measured, so a GPU runs every row as before
        shared = SHARE_ROWS and self.lm.device.type == "cpu" and len(first) < len(rows) and \
            len(first) * suffix_len >= SHARE_MIN_POSITIONS and \
            (prefix_len == 0 or len(first) * prefix_len >= SHARE_MIN_POSITIONS)
        unique = [(list(r), s) for r, s in first] if shared else [(self.ids[i], self.subj[i]) for i in rows]
        return shared, slot, unique

    def _run_once(self, unique: list[tuple[list[int], int]],
                  entries: list[Site]) -> tuple[KV | None, BlockCalls, dict[str, torch.Tensor]]:
        """The prefix's keys/values, the block calls and the residuals at `entries` of one run of the rows."""
        lm, dev, pad = self.lm, self.lm.device, self.lm.tok.pad_token_id
        ids = [r for r, _ in unique]
        subj = [s for _, s in unique]
        B, P, S = len(ids), max(subj), max(len(r) - s for r, s in zip(ids, subj))
        kv = None
        if P > 0:
            # Prefix, right-padded and unmasked: a real token never attends to the pads after it, and no query
            # row is ever fully masked (which would give NaN). The pads' cache entries are masked out below.
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
        with Hooks(lm) as hooks:
            h = hooks.capture(entries)
            calls = lm.runner.forward(input_ids=suffix.to(dev), attention_mask=mask.to(dev),
                                      position_ids=pos.to(dev), kv=kv, calls=True).calls
        assert calls is not None, "forward(calls=True) records the calls"
        return kv, calls, h

    def _prepare_group(self, rows: list[int]) -> _Group:
        dev = self.lm.device
        shared, slot, unique = self._unique(rows)
        row_layers = [self.layers[self.req[i]] for i in rows]
        entries = {l: Site("resid_pre", l) for l in sorted(set(row_layers))}
        kv, calls, h = self._run_once(unique, list(entries.values()))
        if shared:
            index = torch.tensor(slot, device=dev)
            kv = kv.rows(index) if kv is not None else None
            h = {name: t.index_select(0, index) for name, t in h.items()}
            calls = [None if c is None else _per_row(c, len(unique), lambda v: v.index_select(0, index))
                     for c in calls]
        # rows [start, end) of the group enter at block l (the rows are in layer order)
        joins = {l: (row_layers.index(l), len(row_layers) - row_layers[::-1].index(l)) for l in entries}
        local = {r: i for i, r in enumerate(rows)}
        scored: list[tuple[Any, ...]] = []
        sel_row, sel_col = [], []
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
        return _Group(torch.tensor(rows, device=dev), calls, kv, scored,
                      {l: (a, b, h[e.name][a:b]) for (l, e), (a, b) in zip(entries.items(), joins.values())},
                      torch.tensor(sel_row, device=dev), torch.tensor(sel_col, device=dev))

    def logits(self, deltas: Deltas, init: dict[str, torch.Tensor] | None = None,
               reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits at every scored target token (T, V) and at the subject's last token of each KL row (n, V),
        with deltas[site][j] (n_requests, d_model) added to the site's output at the subject's last token of
        request j's rows. `init` (if given) receives each site's unchanged output on request j's
        plain-template row."""
        if reference:
            return self._reference_logits(deltas, init)
        logits = self.lm.runner.logits(self.states(deltas, init), norm=False)
        T = len(self.t_row)
        return logits[:T], logits[T:]

    def states(self, deltas: Deltas, init: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The final-normed states (T + n, d_model) whose logits `logits` returns (scored target tokens, then
        the KL rows), by the fast path."""
        if not self._prepared:
            self._prepare()
        parts = []
        seen: dict[str, dict[int, torch.Tensor]] = {s: {} for s in self.sites}
        for g in self._groups:
            req = self.req_t[g.rows]
            rows = g.rows.tolist()
            with Hooks(self.lm) as hooks:
                for l, (a, b, _) in g.joins.items():  # each layer's rows get their deltas in its block
                    for s in self.sites:
                        def add(h: torch.Tensor, s: str = s, a: int = a, b: int = b) -> torch.Tensor:
                            for i in range(a, b):
                                if rows[i] in self.first_row:
                                    seen[s][rows[i]] = h[i, 0].detach().float().clone()
                            h = h.clone()
                            h[a:b, 0] = h[a:b, 0] + deltas[s][req[a:b]].to(h.dtype)
                            return h
                        hooks.set(site(s, l), add)
                h = self._run(g)
            parts.append(h[g.sel_row, g.sel_col])
        if init is not None:
            for s in self.sites:
                init[s] = torch.stack([seen[s][r] for r in self.first_row])
        normed: torch.Tensor = self.lm.adapter.final_norm(torch.cat(parts)[self._order])
        return normed

    def _run(self, g: _Group) -> torch.Tensor:
        """The group's residuals after the last block: one run from its layer, or, for rows at several layers,
        block by block with each layer's rows joining at their block (runner.step, per-row keys and
        values)."""
        run = self.lm.runner
        if len(g.joins) == 1:
            [(l, (_, _, h))] = g.joins.items()
            return run.run_blocks(h, l, g.calls, kv=g.kv)
        h_run: torch.Tensor | None = None
        for j in range(min(g.joins), self.lm.adapter.n_layers):
            if j in g.joins:
                h_new = g.joins[j][2]
                h_run = h_new if h_run is None else torch.cat([h_run, h_new])
            assert h_run is not None, "the first block run is the first join's"
            n, kv = h_run.shape[0], g.kv
            calls = list(g.calls)
            call = calls[j]
            if call is not None:
                calls[j] = _per_row(call, len(g.rows), lambda v: v[:n])
            h_run = run.step(h_run, j, calls, None if kv is None else (kv.keys[j][:n], kv.values[j][:n]))
        assert h_run is not None
        return h_run

    # -- the straightforward path (tests) --------------------------------------------------------------------
    def _reference_logits(self, deltas: Deltas,
                          init: dict[str, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        lm = self.lm
        ids, mask = pad_right(self.ids, lm.tok.pad_token_id, lm.device)
        rows = torch.arange(len(self.ids), device=lm.device)
        subj = torch.tensor(self.subj, device=lm.device)

        layer_t = torch.tensor([self.layers[j] for j in self.req], device=lm.device)
        first = torch.tensor(self.first_row, device=lm.device)

        def add_deltas(hooks: Hooks) -> None:
            for l in sorted(set(self.layers)):
                at = (layer_t == l).nonzero()[:, 0]  # the rows of requests at layer l
                for s in self.sites:
                    def add(h: torch.Tensor, s: str = s, at: torch.Tensor = at, l: int = l) -> torch.Tensor:
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
        assert h is not None, "a full read keeps the final state"
        rw = lm.runner.logits(h[torch.tensor(self.t_row), torch.tensor(self.t_pos)], norm=False)
        kl = lm.runner.logits(h[self.kl_rows, subj[self.kl_rows]], norm=False)
        return rw, kl


def _per_row(call: tuple[tuple[Any, ...], dict[str, Any]], batch: int,
             take: Callable[[torch.Tensor], torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A recorded block call (args, kwargs) of `batch` rows with `take` applied to every per-row tensor (two
    or more dimensions, the batch first: masks, positions, rotary embeddings; also inside tuples): the rows of
    a shared run repeated, or the first n rows of a group; the rest as recorded."""
    def pick(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[0] == batch:
            return take(v)
        if isinstance(v, tuple):
            return tuple(pick(x) for x in v)
        return v
    args, kwargs = call
    return tuple(pick(a) for a in args), {k: pick(v) for k, v in kwargs.items()}
