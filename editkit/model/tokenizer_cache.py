"""The tokenizer of a model folder editkit converted (the shipped models, GGUF files), in a form that loads
fast.

transformers' AutoTokenizer builds a tokenizer whose class has an __init__ of its own (Gemma's among them)
from the vocabulary and merges of tokenizer.json decoded by Python's json module: 7 s of a warm `editkit
predict` for Gemma 3's 262,144 tokens and 514,906 merges on the 2-core machine. The same file read by the
`tokenizers` library (Rust) and wrapped by the same class, with the same arguments, is the same tokenizer;
written compactly (no indentation, each merge as one "a b" string where no token holds a space) it loads in
about a second there.

    tok = fast_tokenizer(folder, say)   # the fast form, built once beside the converted weights and checked

The fast form is a cache folder (`<cache>/models/tokenizers/<folder>-<key>.v2/`; the key digests the source
files' sizes and times and the transformers and tokenizers versions): `tokenizer.json` and
`editkit-tokenizer.json` (the class, its arguments, and the check's verdict). It is built from the first, slow
load and used only when it gives the same result as the slow one on `check_texts()`: ids with and without
special tokens, offsets, tokens, decodings, left and right padding, the vocabulary, the special tokens and the
class's settings. Otherwise the folder's tokenizer loads the slow way and `say` tells why, at every load. The
memo also says whether `tokenizers` alone, without the class, gives the same ids and decodings
(`raw_differences`): only then does a light answer (model/quick.py) read the tokenizer that way.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ..core.cache import Store, read_json, write_json
from ..core.paths import DATA

TOKENIZERS = Store("models/tokenizers", version=2)
MEMO = "editkit-tokenizer.json"
SOURCES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
           "chat_template.jinja")
# init arguments that name files or objects of the first load (given afresh when the fast form loads)
NOT_KEPT = ("name_or_path", "is_local", "local_files_only", "added_tokens_decoder", "tokenizer_file",
            "vocab_file", "merges_file", "vocab", "merges", "tokenizer_object", "post_processor", "auto_map")
SETTINGS = ("padding_side", "truncation_side", "model_max_length", "clean_up_tokenization_spaces",
            "split_special_tokens", "model_input_names", "chat_template", "special_tokens_map",
            "all_special_ids", "pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id")

Say = Callable[[str], None]


def fast_tokenizer(folder: Path, say: Say = lambda m: None) -> Any:
    """The tokenizer of a converted model folder: its fast form when that was checked equal to the slow load,
    else the slow load (AutoTokenizer). The first call builds and checks the fast form (and returns the slow
    load)."""
    folder, built = Path(folder), []

    def build(tmp: Path) -> None:
        built.append(slow_tokenizer(folder))
        say("writing the tokenizer's fast form (once)")
        write_fast_form(built[0], folder, tmp)

    try:
        cached = cache_path(folder)
        TOKENIZERS.build_folder(cached, build, say)  # checks the files it holds; built when missing or damaged
    except OSError as exc:  # a cache this process cannot write (a read-only shared folder)
        say(f"tokenizer: its fast form cannot be written ({exc}); loading it the slow way")
        return built[0] if built else slow_tokenizer(folder)
    if built:
        return built[0]
    memo = TOKENIZERS.get(cached / MEMO)  # an unreadable memo is set aside (rebuilt by the next load)
    if memo is None or not memo["same"]:
        why = f"differs from the slow load ({memo['why']})" if memo else "could not be read"
        say(f"tokenizer: its fast form {why}; loading it the slow way")
        return slow_tokenizer(folder)
    return load_fast_form(cached, folder, memo)


def cache_path(folder: Path) -> Path:
    """The fast form's folder for `folder` at these versions of transformers and tokenizers (read from their
    installed metadata: importing transformers would take seconds of a light caller's start,
    model/quick.py)."""
    files = {f: [(folder / f).stat().st_size, (folder / f).stat().st_mtime_ns] for f in SOURCES
             if (folder / f).exists()}
    return TOKENIZERS.path(folder.name, suffix="", files=files, transformers=version("transformers"),
                           tokenizers=version("tokenizers"))


def slow_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer as transformers loads it by itself (the reference the fast form is checked
    against)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def write_fast_form(slow: Any, folder: Path, out: Path) -> None:
    """tokenizer.json written compactly and the memo of the class and its arguments, then the check: the memo
    records whether the fast form gives the same as `slow` on check_texts(), and if not, the first
    difference."""
    from transformers import PreTrainedTokenizerFast

    data = json.loads(slow.backend_tokenizer.to_str())
    merges = data.get("model", {}).get("merges")
    if merges and all(isinstance(m, list) and len(m) == 2 and " " not in m[0] + m[1] for m in merges):
        data["model"]["merges"] = [f"{a} {b}" for a, b in merges]  # the legacy form: same pairs, read faster
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")),
                                        encoding="utf-8")
    kwargs = {k: v for k, v in slow.init_kwargs.items() if k not in NOT_KEPT}
    kwargs.update(padding_side=slow.padding_side, truncation_side=slow.truncation_side)
    kwargs = PreTrainedTokenizerFast.convert_added_tokens(kwargs, save=True)  # AddedTokens as JSON objects
    memo = {"class": type(slow).__name__, "kwargs": kwargs, "same": False, "why": ""}
    try:
        json.dumps(memo)
        fast = load_fast_form(out, folder, memo)
        memo["why"] = differences(slow, fast, check_texts()) or ""
    except (TypeError, ValueError, OSError, KeyError) as exc:  # arguments JSON cannot hold, a file it refuses
        memo["why"] = f"{type(exc).__name__}: {exc}"[:300]
    memo["same"] = not memo["why"]
    memo["raw_why"] = "not checked"
    if memo["same"]:
        memo["raw_why"] = raw_differences(slow, out / "tokenizer.json", check_texts())
    memo["raw_same"] = not memo["raw_why"]
    write_json(out / MEMO, memo)


def raw_differences(slow: Any, path: Path, texts: list[str]) -> str:
    """The first way `tokenizers` alone on the fast form (no transformers class around it, as model/quick.py
    reads it) differs from `slow`: the ids of each text with its special tokens, the decoding of every id;
    "" if none."""
    import tokenizers

    raw = tokenizers.Tokenizer.from_file(str(path))
    for text in texts:
        if raw.encode(text, add_special_tokens=True).ids != slow(text, add_special_tokens=True)["input_ids"]:
            return f"the ids of {text[:60]!r}"
    ids = [[i] for i in range(len(slow))]
    got, want = raw.decode_batch(ids, skip_special_tokens=False), slow.batch_decode(ids)
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    return "" if first is None else f"the decoding of token {first}: {got[first]!r} != {want[first]!r}"


def raw_tokenizer(folder: Path) -> Any | None:
    """`tokenizers`' own Tokenizer on a folder's fast form when that form was checked equal to transformers'
    load without the class around it (`raw_differences`), else None (not built yet, or it differs). Builds
    nothing."""
    cached = cache_path(Path(folder))
    memo = TOKENIZERS.get(cached / MEMO) if TOKENIZERS.complete(cached) else None
    if not memo or not memo.get("same") or not memo.get("raw_same"):
        return None
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(cached / "tokenizer.json"))


def load_fast_form(cached: Path, folder: Path, memo: dict[str, Any]) -> Any:
    """The tokenizer class of the slow load (PreTrainedTokenizerFast if transformers does not export it) on
    the compact tokenizer.json, read by `tokenizers` directly, with the slow load's arguments."""
    import transformers
    from transformers import PreTrainedTokenizerFast

    cls = getattr(transformers, memo["class"], None)
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedTokenizerFast)):
        cls = PreTrainedTokenizerFast
    kwargs = copy.deepcopy(memo["kwargs"])  # convert_added_tokens pops from the dicts it converts
    kwargs = PreTrainedTokenizerFast.convert_added_tokens(kwargs, save=False)
    return cls(tokenizer_file=str(cached / "tokenizer.json"), name_or_path=str(folder), **kwargs)


def check_texts(facts: int = 200, lines: int = 200) -> list[str]:
    """Texts the fast form must tokenize as the slow load does: edge cases (spaces, special tokens written in
    the text, unicode, emoji, digits, code), the first `facts` known-fact prompts and `lines` lines of
    WikiText-2."""
    edge = ["", " ", "  two leading spaces", "trailing space ", "The Colosseum is located in the city of",
            "<bos>written special tokens<eos> <pad> <|endoftext|> <|im_start|>user", "a\n\nb\tc   d\r\n",
            "Ünïcödé — “quotes” 日本語 한국어 Ελληνικά العربية 😀👍🏽", "3.14159 1,234,567 0x1F 2024-11-28",
            "def f(x):\n    return x ** 2  # code", "ﬁ ligature, NBSP\u00a0here, zero\u200bwidth",
            "!!!???...,,,"]
    known = [f["prompt"] for f in read_json(DATA / "known_1000.json")[:facts]]
    text = (DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
    wiki = [line for line in text.splitlines() if line.strip()]
    return edge + known + wiki[:lines]


def differences(slow: Any, fast: Any, texts: list[str]) -> str | None:
    """The first way `fast` tokenizes differently from `slow`, in words; None when it never does."""
    for name in SETTINGS:
        if getattr(slow, name, None) != getattr(fast, name, None):
            return f"{name}: {getattr(slow, name, None)!r} != {getattr(fast, name, None)!r}"
    if len(slow) != len(fast) or slow.get_vocab() != fast.get_vocab():
        return "the vocabulary differs"
    if {i: str(t) for i, t in slow.added_tokens_decoder.items()} != \
            {i: str(t) for i, t in fast.added_tokens_decoder.items()}:
        return "the added tokens differ"
    for text in texts:
        for special in (True, False):
            a, b = (t(text, add_special_tokens=special, return_offsets_mapping=True) for t in (slow, fast))
            if a["input_ids"] != b["input_ids"] or a["offset_mapping"] != b["offset_mapping"]:
                return f"the ids or offsets of {text[:60]!r} (special tokens {special})"
            ids = a["input_ids"]
            if slow.convert_ids_to_tokens(ids) != fast.convert_ids_to_tokens(ids) or any(
                    slow.decode(ids, skip_special_tokens=s) != fast.decode(ids, skip_special_tokens=s)
                    for s in (True, False)):
                return f"the tokens or decoding of {text[:60]!r}"
    for side in ("left", "right"):
        a, b = (dict(t(texts[:32], padding=True, padding_side=side)) for t in (slow, fast))
        if a != b:
            return f"a batch padded on the {side}"
    return None
