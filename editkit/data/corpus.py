"""The shipped text corpus: WikiText-2 (CC BY-SA 3.0, Merity et al. 2016; see assets/data/PROVENANCE.md).

Used for second-moment statistics C = E[k k^T] (every editing method) and for FFN key trigger examples (Geva et al.).
The files are in WikiText's tokenized form; `detokenize` undoes it (" @-@ " -> "-", " , " -> ", " ...).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator

from ..core.paths import DATA

NOTICE = ("WikiText-2 (Merity et al. 2016), Wikipedia text under CC BY-SA 3.0; "
          "copied from pytorch/examples, see assets/data/PROVENANCE.md")
SPLITS = ("valid", "test")


def detokenize(line: str) -> str:
    s = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    s = s.replace("<unk>", "?")
    s = re.sub(r" ([.,;:!?)\]}'])", r"\1", s)
    s = re.sub(r"([(\[{]) ", r"\1", s)
    s = s.replace(" n't", "n't").replace(" 's", "'s")
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    return s.strip()


@lru_cache(maxsize=4)
def paragraphs(split: str = "valid") -> tuple[str, ...]:
    """Detokenized paragraphs of a split (headings "= Title =" and empty lines dropped)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    lines = (DATA / "wikitext2" / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    return tuple(detokenize(l) for l in lines if l.strip() and not l.strip().startswith("="))


def corpus_tokens(tok, split: str = "valid") -> int:
    """How many tokens `token_chunks` yields for the whole split (BOS tokens not counted), per tokenizer."""
    key = (id(tok), split)
    if key not in _TOTALS:
        _TOTALS[key] = sum(len(c) - (1 if tok.bos_token_id is not None and c[0] == tok.bos_token_id else 0)
                           for c in token_chunks(tok, 10 ** 12, split=split))
    return _TOTALS[key]


_TOTALS: dict = {}


def token_chunks(tok, n_tokens: int, seq_len: int = 128, split: str = "valid") -> Iterator[list[int]]:
    """Consecutive chunks of at most `seq_len` token ids (paragraph-aligned, with the tokenizer's BOS when it
    adds one), until `n_tokens` tokens have been yielded."""
    total = 0
    for text in paragraphs(split):
        ids = tok(text, add_special_tokens=True)["input_ids"]
        has_bos = tok.bos_token_id is not None and ids and ids[0] == tok.bos_token_id
        head, body = (ids[:1], ids[1:]) if has_bos else ([], ids)
        step = seq_len - len(head)
        for i in range(0, len(body), step):
            chunk = head + body[i:i + step]
            if len(chunk) < 2:
                continue
            chunk = chunk[: max(2, min(len(chunk), n_tokens - total + len(head)))]
            yield chunk
            total += len(chunk) - len(head)
            if total >= n_tokens:
                return
