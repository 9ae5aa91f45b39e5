"""What the model predicts after a prompt: its top next tokens, and the logit lens (nostalgebraist 2020), each
layer's residual stream read as if the model stopped there. Typed results with their tables and figures.

    predict(lm, "The Eiffel Tower is located in the city of", k=5)   # Predictions: .top, .to_frame(), .figure()
    logit_lens(lm, prompt, k=5)                                      # LogitLens: per layer its top-k tokens

The model is read through editkit/model/text.py (the runner's one vocabulary projection: final norm, unembedding,
softcap), at the weights the calling context sees (base + any applied edits).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core.errors import EditkitError
from .core.results import JsonObject, Result, frame
from .figures.lens import logit_lens_figure, predictions_figure
from .model.quick import quick_top_k
from .model.text import Prediction, block_states, top_k
from .model.tokens import check_prompt, token_strings


@dataclass
class Predictions(Result):
    """The model's top-k next tokens after `prompt`, most likely first (what `predict --json` writes)."""

    prompt: str
    predictions: list[Prediction]
    model: str | None = None

    _show = "table"

    @property
    def top(self) -> Prediction:
        """The most likely next token."""
        return self.predictions[0]

    def __getitem__(self, i: int) -> Prediction:
        return self.predictions[i]

    def __len__(self) -> int:
        return len(self.predictions)

    def __iter__(self):
        return iter(self.predictions)

    def headline(self) -> str:
        return f"after {self.prompt[-60:]!r}: {self.top.token!r} (p = {self.top.prob:.4f})"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "prompt": self.prompt, "predictions": [p.to_dict() for p in self.predictions]}

    @classmethod
    def _from_json(cls, d: dict) -> "Predictions":
        return cls(d["prompt"], [Prediction(**p) for p in d["predictions"]], d.get("model"))

    def to_frame(self):
        """One row per token: rank, token, token_id, prob, logit."""
        return frame([{"rank": i + 1, **p.to_dict()} for i, p in enumerate(self.predictions)])

    def figure(self):
        """The probabilities as horizontal bars, the most likely on top."""
        return predictions_figure(self.to_json())


def predict(lm, prompt: str, k: int = 5) -> Predictions:
    """The top `k` next tokens after `prompt` with their probabilities and logits. A model whose load was
    deferred (LM.deferred) answers without loading it where the light forward can (model/quick.py: the same
    predictions)."""
    if getattr(lm, "pending", False) and (light := quick_top_k(lm.source, prompt, k)) is not None:
        return Predictions(prompt, light, lm.name)
    return Predictions(prompt, top_k(lm, prompt, k), lm.name)


@dataclass(frozen=True)
class LensToken:
    token: str
    prob: float


@dataclass
class LogitLens(Result):
    """Per layer l, the top-k tokens of softmax(W_U norm(h_l)) at `position` of the prompt's `tokens`; the last
    layer's row is the model's own prediction (nostalgebraist 2020)."""

    tokens: list[str]
    position: int
    layers: list[list[LensToken]]

    @property
    def k(self) -> int:
        return len(self.layers[0]) if self.layers else 0

    def first_layer(self, token: str) -> int | None:
        """The first layer whose top token is `token` (None: no layer's)."""
        return next((l for l, row in enumerate(self.layers) if row and row[0].token == token), None)

    def ranks(self, token: str) -> list[int | None]:
        """Per layer, the rank of `token` among the top k (0 = top; None: below the top k)."""
        return [next((i for i, t in enumerate(row) if t.token == token), None) for row in self.layers]

    def headline(self) -> str:
        final = self.layers[-1][0]
        return (f"at {self.tokens[self.position]!r}: {final.token!r} at the last layer, first the top token at "
                f"layer {self.first_layer(final.token)}")

    def to_json(self) -> JsonObject:
        return {"tokens": self.tokens, "position": self.position,
                "layers": [[{"token": t.token, "prob": t.prob} for t in row] for row in self.layers]}

    @classmethod
    def _from_json(cls, d: dict) -> "LogitLens":
        return cls(list(d["tokens"]), d["position"], [[LensToken(t["token"], t["prob"]) for t in row]
                                                       for row in d["layers"]])

    def to_frame(self):
        """One row per layer and rank: layer, rank (1 = top), token, prob."""
        return frame([{"layer": l, "rank": i + 1, "token": t.token, "prob": t.prob}
                      for l, row in enumerate(self.layers) for i, t in enumerate(row)])

    def figure(self):
        """Layers (rows) x rank 1..k (columns), coloured by probability and labelled with the token."""
        return logit_lens_figure(self.to_json(), self.k)


@torch.no_grad()
def logit_lens(lm, prompt: str, k: int = 5, position: int = -1) -> LogitLens:
    """Each layer's residual at `position` through the final norm and W_U: its top-k tokens with probabilities."""
    check_prompt(lm, prompt)
    if k < 1:
        raise EditkitError("the logit lens needs k >= 1")
    return _lens(lm, prompt, k, position)[0]


def _lens(lm, prompt: str, k: int, position: int) -> tuple[LogitLens, torch.Tensor]:
    """The logit lens and the last layer's logits at `position` (the model's own logits there), from one run that
    stops after the last block and one vocabulary projection of its L rows."""
    hidden = block_states(lm, prompt)
    logits = lm.runner.logits(hidden[:, position])  # (layers, vocab)
    probs = torch.softmax(logits, -1)
    p, i = probs.topk(min(k, probs.shape[-1]), dim=-1)
    rows = [[LensToken(lm.tok.decode([int(t)]), float(q)) for q, t in zip(p[l], i[l])] for l in range(len(p))]
    return LogitLens(token_strings(lm, prompt), position, rows), logits[-1]


@torch.no_grad()
def predict_with_lens(lm, prompt: str, k: int = 5) -> tuple[Predictions, LogitLens]:
    """`predict` and `logit_lens` at the last token from one run: the lens's last row is the model's own next-token
    distribution (runner.logits of the last block's output, as the model's head computes it), so one forward and
    one projection of L rows give both (about a third of what the two calls cost; a served home page makes both
    for every new prompt)."""
    check_prompt(lm, prompt)
    if k < 1:
        raise EditkitError("top-k needs k >= 1")
    lens, logits = _lens(lm, prompt, k, -1)
    probs = torch.softmax(logits, -1)
    p, i = probs.topk(min(k, probs.numel()))
    preds = [Prediction(lm.tok.decode([int(t)]), int(t), float(q), float(logits[t])) for q, t in zip(p, i)]
    return Predictions(prompt, preds, lm.name), lens
