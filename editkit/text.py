"""Text utilities: tokenizing prompts, locating a subject's tokens, next-token predictions, continuations of one
prompt (greedy or sampled, through runner.complete), and the logit lens."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .errors import EditkitError
from .limits import limits
from .runner import Decoding
from .sites import layers


def check_prompt(lm, prompt: str, max_tokens: int | None = None) -> None:
    """Clear errors for empty prompts and prompts over the model's limit or the cap (`max_tokens`, default the
    configured limit limits.limits().prompt_tokens, 512 unless EDITKIT_LIMITS says otherwise)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise EditkitError("the prompt is empty")
    if "\x00" in prompt:
        raise EditkitError("the prompt contains a NUL character")
    n = len(lm.tok(prompt, add_special_tokens=True)["input_ids"])
    cap = min(lm.adapter.max_length, max_tokens or limits().prompt_tokens)
    if n > cap:
        raise EditkitError(f"the prompt has {n} tokens; the limit is {cap}")


def encode(lm, prompts: list[str] | str, pad_side: str = "right") -> dict:
    """Tokenize a batch with the model's special tokens (Gemma's <bos>), padded, on the model's device."""
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    batch = lm.tok(prompts, return_tensors="pt", padding=True, padding_side=pad_side, add_special_tokens=True)
    return {k: v.to(lm.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}


def token_strings(lm, prompt: str) -> list[str]:
    ids = lm.tok(prompt, add_special_tokens=True)["input_ids"]
    return [lm.tok.decode([i]) for i in ids]


def find_subject_range(tok, prompt: str, subject: str, occurrence: int = 0) -> tuple[int, int]:
    """Token range [start, end) of `subject` in `prompt` (counting special tokens the tokenizer adds).

    Located by character offsets, so leading spaces, unicode and repeated subjects are handled:
    the `occurrence`-th match (0 = first) is used. Tokens that overlap the subject's characters at all belong
    to the range (a BPE token " Needle" covers "Needle").
    """
    if not subject or not subject.strip():
        raise EditkitError("the subject is empty")
    subject = subject.strip()
    starts, at = [], prompt.find(subject)
    while at != -1:
        starts.append(at)
        at = prompt.find(subject, at + 1)
    if not starts:
        raise EditkitError(f"subject '{subject}' does not occur in the prompt '{prompt}'")
    if not 0 <= occurrence < len(starts):
        raise EditkitError(f"subject '{subject}' occurs {len(starts)} time(s); occurrence {occurrence} asked")
    c0, c1 = starts[occurrence], starts[occurrence] + len(subject)
    enc = tok(prompt, add_special_tokens=True, return_offsets_mapping=True)
    idx = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < c1 and b > c0]
    if not idx:
        raise EditkitError(f"subject '{subject}' maps to no token of the prompt")
    return idx[0], idx[-1] + 1


def guess_subject(prompt: str) -> str:
    """A first guess for the subject: the longest run of capitalised words after the first word."""
    words = prompt.split()
    runs, cur = [], []
    for i, w in enumerate(words):
        if w[:1].isupper() and (i > 0 or len(words) == 1 or not cur):
            cur.append(w.strip(".,;:!?").removesuffix("'s").removesuffix("’s"))
        else:
            if cur:
                runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    # drop a leading sentence-initial article like "The"
    runs = [r[1:] if r and r[0] in ("The", "A", "An") and len(r) > 1 else r for r in runs]
    best = max(runs, key=len, default=[])
    return " ".join(best) if best else (words[-1] if words else "")


@dataclass
class Prediction:
    token: str
    token_id: int
    prob: float
    logit: float

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def last_logits(lm, prompts: list[str] | str) -> torch.Tensor:
    """Logits at each prompt's last real token, (batch, vocab), projecting only there."""
    batch = encode(lm, prompts)
    last = batch["attention_mask"].sum(1) - 1
    h = lm.runner.hidden(**batch)  # already through the final norm
    return lm.runner.logits(h[torch.arange(h.shape[0], device=h.device), last], norm=False)


def top_k(lm, prompt: str, k: int = 5) -> list[Prediction]:
    check_prompt(lm, prompt)
    if k < 1:
        raise EditkitError("top-k needs k >= 1")
    logits = last_logits(lm, prompt)[0]
    probs = torch.softmax(logits, -1)
    p, i = probs.topk(min(k, probs.numel()))
    return [Prediction(lm.tok.decode([t]), int(t), float(q), float(logits[t])) for q, t in zip(p, i)]


def greedy(lm, prompt: str, max_new_tokens: int = 20) -> str:
    """Greedy continuation of `prompt` (the new text only)."""
    check_prompt(lm, prompt)
    return lm.runner.complete(prompt, Decoding.greedy(max_new_tokens))[0]


def sample(lm, prompt: str, max_new_tokens: int, seed: int = 0, top_k: int = 5, min_new_tokens: int = 0) -> str:
    """A top-k sampled continuation of `prompt` (the new text only), reproducible for a given seed also while other
    threads sample (runner.SeededTopK)."""
    return lm.runner.complete(prompt, Decoding.sampled(max_new_tokens, seed, top_k, min_new_tokens))[0]


@torch.no_grad()
def block_outputs(lm, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every block's output (layers, tokens, d_model) and the model's logits (tokens, vocab) for one prompt."""
    L = lm.adapter.n_layers
    got = lm.runner.read(layers("resid_post", L), full=True, **encode(lm, prompt))
    return torch.stack([got[f"resid_post.{l}"][0] for l in range(L)]), lm.runner.logits(got.hidden, norm=False)[0]


@torch.no_grad()
def logit_lens(lm, prompt: str, k: int = 5, position: int = -1) -> dict:
    """Each layer's residual at `position` through the final norm and W_U (nostalgebraist 2020).

    Returns tokens, and per layer the top-k tokens with probabilities; the last layer equals the model's output.
    """
    check_prompt(lm, prompt)
    hidden, _ = block_outputs(lm, prompt)
    probs = torch.softmax(lm.runner.logits(hidden[:, position]), -1)  # (layers, vocab)
    p, i = probs.topk(k, dim=-1)
    return {
        "tokens": token_strings(lm, prompt),
        "position": position,
        "layers": [
            [{"token": lm.tok.decode([int(t)]), "prob": float(q)} for q, t in zip(p[l], i[l])]
            for l in range(probs.shape[0])
        ],
    }
