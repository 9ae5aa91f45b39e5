"""Activations: the tensors at any set of sites for a batch of prompts, from one run, as a typed result.

    acts = read_activations(lm, ["The Space Needle is in downtown", "The Eiffel Tower is in"],
                            ["resid_pre.3", "mlp_out.5", "attn_out.5"])     # editkit.activations(...)
    acts["mlp_out.5"]          # (prompts, tokens, d_model) tensor, padded on the right
    acts.tokens[1]             # the second prompt's token strings; acts.mask marks real tokens
    acts.probs(" Seattle")     # p(token) after each prompt (its last real token), from the same run
    acts.to_frame()            # one row per prompt, token and site: the state's norm
    acts.to_frame("mlp_out.5") # one row per prompt and token, one column per dimension (for a probe)

Sites are sites.py's names; "mlp_out.*" means that kind at every layer. The run goes to the end (the
next-token logits come with it) through the runner, at the weights and interventions this context sees (an
applied edit, an `Intervention` block).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from .scoring import target_ids
from .sites import layers, parse
from .tokens import check_prompt, encode

if TYPE_CHECKING:
    import pandas as pd

    from .lm import LM


@dataclass
class Activations(Result):
    """The tensors at `sites` for `prompts` (module docstring). `values[site]` is (prompts, tokens, width),
    positions past a prompt's end (padding) hold what the model computed there and are False in `mask`;
    `logits` (prompts, vocab) are the next-token logits after each prompt's last real token (not in the
    JSON)."""

    prompts: list[str]
    tokens: list[list[str]]
    sites: list[str]
    values: dict[str, torch.Tensor]
    model: str | None = None
    logits: torch.Tensor | None = field(default=None, repr=False, compare=False)

    _show = "table"
    _tok = None  # the tokenizer that read it (probs of a token given as text)

    def __getitem__(self, site: str) -> torch.Tensor:
        name = parse(site).name
        if name not in self.values:
            raise EditkitError(f"{name} was not read; these were: {', '.join(self.sites) or 'none'}")
        return self.values[name]

    def __contains__(self, site: object) -> bool:
        return isinstance(site, str) and parse(site).name in self.values

    @property
    def mask(self) -> torch.Tensor:
        """(prompts, tokens) bool: True at each prompt's own tokens."""
        width = max(len(t) for t in self.tokens)
        return torch.tensor([[i < len(t) for i in range(width)] for t in self.tokens])

    def probs(self, token: int | str) -> torch.Tensor:
        """p(token | prompt) for each prompt: a token id, or a string whose first token is read (" Seattle",
        with its leading space as it continues the prompt)."""
        if self.logits is None:
            raise EditkitError("these activations carry no logits (read back from JSON)")
        return torch.softmax(self.logits.float(), -1)[:, self._token_id(token)]

    def _token_id(self, token: int | str) -> int:
        if isinstance(token, int) and not isinstance(token, bool):
            return token
        if not isinstance(token, str) or self._tok is None:
            raise EditkitError("give a token id (e.g. a trace's answer_id) or the token's text")
        return target_ids(self._tok, token)[0]

    def headline(self) -> str:
        shapes = ", ".join(f"{s} {list(self.values[s].shape)}" for s in self.sites[:4])
        more = f" and {len(self.sites) - 4} more" if len(self.sites) > 4 else ""
        return f"{len(self.prompts)} prompt(s); {shapes or 'no site'}{more}"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "prompts": self.prompts, "tokens": self.tokens, "sites": self.sites,
                "values": {s: self.values[s].float().tolist() for s in self.sites}}

    @classmethod
    def _from_json(cls, d: JsonObject) -> Activations:
        return cls(list(d["prompts"]), [list(t) for t in d["tokens"]], list(d["sites"]),
                   {s: torch.tensor(d["values"][s]) for s in d["sites"]}, d.get("model"))

    def to_frame(self, site: str | None = None) -> pd.DataFrame:
        """Long format (no `site`): one row per prompt, real token and site with the state's L2 norm. With a
        `site`: one row per prompt and real token, one column per dimension of that site's state."""
        rows: list[dict[Any, Any]] = []
        for i, toks in enumerate(self.tokens):
            for t, tok in enumerate(toks):
                base: dict[Any, Any] = {"prompt_index": i, "position": t, "token": tok}
                if site is None:
                    rows += [{**base, "site": s, "norm": float(self.values[s][i, t].float().norm())}
                             for s in self.sites]
                else:
                    rows.append({**base, **dict(enumerate(self[site][i, t].float().tolist()))})
        return frame(rows)


def site_names(lm: LM, sites: str | Iterable[str]) -> list[str]:
    """Site names from one name or a list; "kind.*" is that kind at every layer."""
    sites = [sites] if isinstance(sites, str) else list(sites)
    out: list[str] = []
    for s in sites:
        kind, _, layer = str(s).partition(".")
        names = [x.name for x in layers(kind, lm.adapter.n_layers)] if layer == "*" else [parse(s).name]
        out += [n for n in names if n not in out]
    return out


@torch.no_grad()
def read_activations(lm: LM, prompts: str | Iterable[str],
                     sites: str | Iterable[str]) -> Activations:
    """The tensors at `sites` for `prompts` (one prompt or a list) in one run, with the next-token logits."""
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    if not prompts:
        raise EditkitError("no prompt given")
    for p in prompts:
        check_prompt(lm, p)
    names = site_names(lm, sites)
    batch = encode(lm, prompts)
    got = lm.runner.read(names, full=True, **batch)
    assert got.hidden is not None, "a full read keeps the final state"
    last = batch["attention_mask"].sum(1) - 1
    h = got.hidden[torch.arange(len(prompts), device=got.hidden.device), last]
    logits = lm.runner.logits(h, norm=False)
    ids = batch["input_ids"].tolist()
    tokens = [[lm.tok.decode([i]) for i in row[:int(n) + 1]] for row, n in zip(ids, last)]
    acts = Activations(prompts, tokens, names, {n: got[n] for n in names}, lm.name, logits)
    acts._tok = lm.tok
    return acts


__all__ = ["Activations", "read_activations", "site_names"]
