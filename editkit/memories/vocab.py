"""Readable vocabulary tokens: what a token looks like decoded, which script it is written in, and a teaching filter.

Gemma's 262k-token vocabulary covers many scripts and byte fragments, so the raw top tokens of a value vector
often read as boxes, pieces of words or bytes. Nothing here hides what the model promotes: `filtered_top` returns
the top tokens among a class (e.g. Latin-script words) *with their rank in the full vocabulary*, to be shown next
to the unfiltered top tokens.

Classes of a decoded token (its text with leading/trailing spaces removed):
- "latin": letters only (apostrophes and inner hyphens allowed), every letter Latin script, at least 2 letters;
- "other script": letters of another script (CJK, Cyrillic, Arabic, Devanagari, ...), named by `script`;
- "number", "punctuation" (no letters or digits), "space" (empty after stripping);
- "fragment": an incomplete UTF-8 sequence (decodes to U+FFFD) or a byte token like <0xE3>;
- "special": the tokenizer's special tokens (<bos>, <pad>, ...).
"""
from __future__ import annotations

import re
import threading
import unicodedata

import torch

CLASSES = ("latin", "other script", "number", "punctuation", "space", "fragment", "special")
FILTERS = {"all": None, "latin": ("latin",)}
_BYTE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def script(ch: str) -> str:
    """The script of a letter, from its Unicode name: LATIN, CYRILLIC, CJK, ARABIC, HANGUL, ... ("" if unnamed)."""
    name = unicodedata.name(ch, "")
    if not name:
        return ""
    first = name.split()[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA") else first


def classify(text: str, special: bool = False) -> str:
    """The class of one decoded token (see module docstring)."""
    if special:
        return "special"
    if "\ufffd" in text or _BYTE.match(text.strip()):
        return "fragment"
    core = text.strip()
    if not core:
        return "space"
    letters = [c for c in core if c.isalpha()]
    if not letters:
        return "number" if any(c.isdigit() for c in core) else "punctuation"
    if all(script(c) == "LATIN" for c in letters) and len(letters) >= 2 and \
            re.fullmatch(r"[^\W\d_]+(?:['’-][^\W\d_]+)*", core):
        return "latin"
    return "other script" if any(script(c) != "LATIN" for c in letters) else "punctuation"


def readable(text: str) -> str:
    """A token as a student can read it: a leading space as '␣', newlines and tabs as '⏎' and '⇥', other control
    characters as \\xNN, an incomplete UTF-8 piece as '�' (kept: it is what the token is)."""
    out = []
    for i, c in enumerate(text):
        if c == " " and (i == 0 or text[i - 1] == " "):
            out.append("␣")
        elif c == "\n":
            out.append("⏎")
        elif c == "\t":
            out.append("⇥")
        elif unicodedata.category(c) in ("Cc", "Cf") and c not in "\u200d":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out) or "∅"


DECODE_CHUNK = 4096  # token ids per batch_decode call (see _Vocab)


class _Vocab:
    """Decoded strings and classes of every token id of one tokenizer, built once. The ids are decoded
    DECODE_CHUNK at a time: a served model's tokenizer is shared and locked per call (loading.SerialTokenizer), so
    another session's tokenizing waits for one chunk (milliseconds), not for all 262k of Gemma's tokens (seconds:
    with one call, every session of a class of 30 stalled for up to 7 s at the first FFN inspection)."""

    def __init__(self, tok, size: int):
        ids = list(range(size))
        texts = []
        for start in range(0, size, DECODE_CHUNK):
            texts += tok.batch_decode([[i] for i in ids[start:start + DECODE_CHUNK]])
        special = set(getattr(tok, "all_special_ids", []) or [])
        self.texts = texts
        self.classes = [classify(t, i in special) for i, t in zip(ids, texts)]
        self.masks = {c: torch.tensor([k == c for k in self.classes]) for c in CLASSES}


_VOCABS: dict = {}
_LOCK = threading.Lock()  # two sessions asking at once build it once


def vocab(lm) -> _Vocab:
    """The decoded vocabulary of `lm` (cached per tokenizer; ~1 s for Gemma's 262k tokens)."""
    key = (id(lm.tok), lm.adapter.vocab_size)
    with _LOCK:
        hit = _VOCABS.get(key)
        if hit is None:
            hit = _VOCABS[key] = _Vocab(lm.tok, lm.adapter.vocab_size)
        return hit


def mask(lm, classes) -> torch.Tensor:
    """Boolean (vocab,) mask of the tokens in any of `classes`."""
    v = vocab(lm)
    out = torch.zeros(lm.adapter.vocab_size, dtype=torch.bool)
    for c in classes:
        out |= v.masks[c]
    return out


def filtered_top(lm, logits: torch.Tensor, k: int, classes) -> list[dict]:
    """The k most likely tokens among `classes`, each with its probability and its rank in the full vocabulary
    (1 = the overall top token): [{"token", "token_id", "prob", "rank", "class"}]."""
    v = vocab(lm)
    logits = logits.float()
    probs = torch.softmax(logits, -1)
    allowed = mask(lm, classes).to(logits.device)
    p, idx = probs.masked_fill(~allowed, -1.0).topk(min(k, int(allowed.sum())))
    rank = lambda t: int((logits > logits[t]).sum()) + 1  # noqa: E731
    return [{"token": v.texts[int(t)], "token_id": int(t), "prob": float(q), "rank": rank(int(t)),
             "class": v.classes[int(t)]} for q, t in zip(p, idx)]


def class_counts(lm, token_ids) -> dict[str, int]:
    """How many of `token_ids` fall in each class (only classes that occur)."""
    v = vocab(lm)
    out: dict[str, int] = {}
    for t in token_ids:
        out[v.classes[int(t)]] = out.get(v.classes[int(t)], 0) + 1
    return out


def hard_to_read(lm, token_ids) -> float:
    """The share of `token_ids` that are not Latin-script words (other scripts, word pieces, bytes, punctuation):
    what a reader of the raw top tokens cannot make sense of."""
    counts = class_counts(lm, token_ids)
    total = sum(counts.values())
    return 1 - counts.get("latin", 0) / total if total else 0.0
