"""Tokens: a prompt checked against the caps, a batch encoded with the model's special tokens, a subject's token
range. Below the runner, which encodes the prompts it completes."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import EditkitError
from ..core.settings import limits

if TYPE_CHECKING:
    import torch

    from .lm import LM


def check_prompt(lm: LM, prompt: str, max_tokens: int | None = None) -> None:
    """Clear errors for empty prompts and prompts over the model's limit or the cap (`max_tokens`, default the
    configured limit settings.limits().prompt_tokens, 512 unless EDITKIT_LIMITS says otherwise)."""
    check_text(prompt)
    check_length(len(lm.tok(prompt, add_special_tokens=True)["input_ids"]), lm.adapter.max_length, max_tokens)


def check_length(n: int, max_length: int, max_tokens: int | None = None) -> None:
    """A clear error for a prompt of `n` tokens over the model's `max_length` or the cap (check_prompt)."""
    cap = min(max_length, max_tokens or limits().prompt_tokens)
    if n > cap:
        raise EditkitError(f"the prompt has {n} tokens; the limit is {cap}")


def check_text(prompt: str) -> None:
    """Clear errors for what is not one non-empty prompt (check_prompt's checks before the tokenizer)."""
    if isinstance(prompt, (list, tuple)):
        raise EditkitError(f"one prompt (a string) is expected here, not a {type(prompt).__name__} of "
                           f"{len(prompt)}; activations, predict, logit_lens and trace take lists of prompts")
    if prompt is not None and not isinstance(prompt, str):
        raise EditkitError(f"a prompt is a string, not {type(prompt).__name__}")
    if not prompt or not prompt.strip():
        raise EditkitError("the prompt is empty")
    if "\x00" in prompt:
        raise EditkitError("the prompt contains a NUL character")


def encode(lm: LM, prompts: list[str] | str, pad_side: str = "right") -> dict[str, Any]:
    """Tokenize a batch with the model's special tokens (Gemma's <bos>), padded, on the model's device."""
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    batch = lm.tok(prompts, return_tensors="pt", padding=True, padding_side=pad_side, add_special_tokens=True)
    return {k: v.to(lm.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}


def pad_right(rows: Sequence[Sequence[int]], pad_id: int,
              device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows right-padded with `pad_id` to the longest, and their attention mask (1 on each row's own
    tokens), as long tensors on `device` (default: the CPU). The one padding of editkit's batched runs."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    return (ids, mask) if device is None else (ids.to(device), mask.to(device))


def token_strings(lm: LM, prompt: str) -> list[str]:
    ids = lm.tok(prompt, add_special_tokens=True)["input_ids"]
    return [lm.tok.decode([i]) for i in ids]


def find_subject_range(tok: Any, prompt: str, subject: str, occurrence: int = 0) -> tuple[int, int]:
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
    runs: list[list[str]] = []
    cur: list[str] = []
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
