"""The model as this context computes with it, written as one GGUF file (llama.cpp, Ollama, LM Studio;
editkit's own loader reads it back through transformers' GGUF reader).

    export_gguf(lm, "edited.gguf", provenance, "f32")   # or "f16", "q8_0"

Tensor names and layouts follow llama.cpp's `convert_hf_to_gguf.py`, and every change it makes to a tensor is
undone by transformers' reader, so a float32 file gives back the in-process weights bit for bit:
- names from gguf-py's own table (`get_tensor_name_map`: model.layers.3.mlp.down_proj -> blk.3.ffn_down);
- Gemma's RMSNorm computes x * (1 + w): llama.cpp stores 1 + w (its `norm_shift`), the reader subtracts 1. The
  stored value is the float32 s with s - 1 == w exactly (w + 1 or a neighbour; it exists for every weight that
  came from a GGUF, w = g - 1; a finer one is said in the notes);
- Llama's q and k rows are reordered per head from RoPE's half-split pairs (HF) to interleaved pairs
  (llama.cpp's `permute`, which the reader inverts);
- tied embeddings: no output.weight, and the reader ties them again.

Types: f32 (every tensor float32), f16 (matrices float16, vectors float32 as llama.cpp keeps them), q8_0
(matrices in blocks of 32 values with one float16 scale, vectors float32; a matrix whose rows are not a
multiple of 32 long stays f16).

Metadata: a model converted from a GGUF (the shipped Gemma 3 270M and SmolLM2 135M, a user's .gguf) keeps
every key of its source (architecture, tokenizer, chat template) but the file type; a Llama-family model
without a GGUF source gets its keys written from its config and its byte-level BPE tokenizer as llama.cpp
writes them (a Gemma 3 needs its source: transformers reads a Gemma-architecture file's tokenizer back as
Gemma's sentencepiece kind). Either way `general.name`, `general.description`, `general.base_model.*` and
`editkit.*` name the base model, the method and the requests. Before a byte is written, the architecture, the
tokenizer and the config are checked: the config transformers' reader rebuilds from the metadata must equal
the model's own, else the file would load as another model and the export is refused.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from ..core.errors import EditkitError
from .export import Exported, Provenance, check_space, check_target, source_gguf, staged, tensor_bytes
from .gguf_header import Entry, raw, read_header
from .ram import gigabytes

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    from .lm import LM

Array: TypeAlias = npt.NDArray[Any]
Meta: TypeAlias = "tuple[Any, GGUFValueType, GGUFValueType | None]"  # a key's value, type, array element type
State: TypeAlias = dict[str, torch.Tensor]

TYPES = ("f32", "f16", "q8_0")
# config.model_type -> (gguf-py's architecture name, Gemma's 1 + w norms, Llama's q/k row order)
ARCHITECTURES = {"llama": ("llama", False, True), "gemma3_text": ("gemma3", True, False)}
QK = 32  # values per Q8_0 block
Q8_BLOCK = 34  # its bytes: a float16 scale and 32 int8 values
CHUNK_ROWS = 4096  # rows quantized at once (bounds the working memory of a large embedding)
# config keys that say how a model is used or saved, not what it computes (or that the export sets itself)
NOT_COMPUTED = {"architectures", "_name_or_path", "transformers_version", "dtype", "torch_dtype", "use_cache",
                "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "output_attentions",
                "output_hidden_states", "return_dict", "model_type", "unk_token_id", "sep_token_id"}


@dataclass(frozen=True)
class Planned:
    """One tensor of the file: its GGUF name, where its data comes from (a parameter of the model, or a tensor
    of the source GGUF copied as it is), its shape (numpy order) and GGML type."""

    name: str
    param: str | None
    copy: Entry | None
    shape: tuple[int, ...]
    ggml: GGMLQuantizationType


@dataclass
class Plan:
    """What one GGUF file will hold, decided before it is written: metadata and tensors in file order."""

    arch: str
    metadata: dict[str, Meta] = field(default_factory=dict)
    tensors: list[Planned] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def export_gguf(lm: LM, file: str | Path, provenance: Provenance, kind: str = "f32",
                say: Callable[[str], None] = lambda message: None, overwrite: bool = False) -> Exported:
    """Write the model as this context sees it to `file` as GGUF of type `kind` (module docstring); an
    existing file is replaced only with `overwrite`."""
    from .weights import effective_state

    t0 = time.perf_counter()
    if kind not in TYPES:
        raise EditkitError(f"GGUF type must be one of {', '.join(TYPES)}, not {kind!r}")
    target = check_target(lm, Path(file), folder=False, overwrite=overwrite)
    arch = _architecture(lm)
    state = effective_state(lm)
    source = source_gguf(lm, say)
    plan = _plan(lm, state, arch, kind, source, provenance)
    _check_config(lm, plan)
    size = _file_bytes(plan)
    check_space(target, size, 3 * tensor_bytes(state)[1])  # the largest tensor, its copy and its encoding
    say(f"writing {target.name} ({kind}, about {gigabytes(size)})")
    with staged(target, folder=False) as tmp:
        _write(tmp, plan, state, source, lm)
    return Exported(str(target), "gguf", kind, target.stat().st_size, len(plan.tensors),
                    time.perf_counter() - t0, provenance.to_json(), plan.notes)


def _architecture(lm: LM) -> tuple[str, bool, bool]:
    model_type = lm.model.config.model_type
    if model_type not in ARCHITECTURES:
        raise EditkitError(f"GGUF export supports {', '.join(sorted(ARCHITECTURES))} models, not "
                           f"{model_type} (export a Hugging Face folder with --hf instead)")
    return ARCHITECTURES[model_type]


def refusal(lm: LM, has_source: bool) -> str | None:
    """Why this model cannot be written as GGUF at all, before any work (a page offers the folder alone
    then), or None; `has_source`: a GGUF it came from exists (export.has_source_gguf, which fetches
    nothing). The tokenizer and config checks come later, in export_gguf."""
    try:
        arch = _architecture(lm)[0]
    except EditkitError as exc:
        return str(exc)
    if not has_source and arch != "llama":
        # transformers reads a Gemma-architecture GGUF's tokenizer back as Gemma's sentencepiece kind: only a
        # Gemma 3 that came from a GGUF (its tokenizer metadata carried over) round-trips
        return (f"GGUF export of a {lm.model.config.model_type} model needs the GGUF it was loaded from; "
                "without one only Llama-family models are written (export a Hugging Face folder instead)")
    return None


# --- the plan: names, layouts, types, metadata ---------------------------------------------------------
def _names(lm: LM, state: State, arch: str) -> dict[str, str]:
    """HF state-dict name -> GGUF tensor name for every tensor to write (a tied head is left out)."""
    import gguf

    table = gguf.get_tensor_name_map(_arch_enum(arch), lm.model.config.num_hidden_layers)
    out: dict[str, str] = {}
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(int(x) for x in t.shape))
        if key in seen:
            continue  # a tied weight: stored once
        seen.add(key)
        stem, _, suffix = name.rpartition(".")
        mapped = table.get_name(stem)
        if mapped is None:
            raise EditkitError(f"the parameter '{name}' has no GGUF tensor name in llama.cpp's {arch} "
                               "layout; export a Hugging Face folder instead")
        out[name] = f"{mapped}.{suffix}"
    return out


def _arch_enum(arch: str) -> Any:
    import gguf

    return next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)


def _ggml_type(shape: tuple[int, ...], kind: str) -> GGMLQuantizationType:
    from gguf import GGMLQuantizationType as T

    if kind == "f32" or len(shape) < 2:
        return T.F32
    if kind == "q8_0" and shape[-1] % QK == 0:
        return T.Q8_0
    return T.F16


def _param(name: str, hf_name: str, t: torch.Tensor, kind: str) -> Planned:
    shape = tuple(int(x) for x in t.shape)
    return Planned(name, hf_name, None, shape, _ggml_type(shape, kind))


def _plan(lm: LM, state: State, arch: tuple[str, bool, bool], kind: str, source: Path | None,
          provenance: Provenance) -> Plan:
    names = _names(lm, state, arch[0])
    plan = Plan(arch[0])
    if (why := refusal(lm, source is not None)) is not None:
        raise EditkitError(why)
    if source is not None:
        _from_source(plan, source, names, state, kind)
    else:
        plan.metadata.update(_config_metadata(lm, arch[0]))
        plan.metadata.update(_tokenizer_metadata(lm))
        plan.tensors = [_param(g, n, state[n], kind) for n, g in names.items()]
    plan.notes += _kept_f16(plan, kind)
    _edit_metadata(plan, kind, provenance)
    return plan


def _kept_f16(plan: Plan, kind: str) -> list[str]:
    """The note (said, not silent) when q8_0 leaves matrices in f16: rows not a multiple of a block's 32
    values cannot be quantized, and llama.cpp's converter stores them f16 the same way."""
    from gguf import GGMLQuantizationType as T

    kept = [t.name for t in plan.tensors if kind == "q8_0" and t.param is not None and t.ggml == T.F16]
    if not kept:
        return []
    stay = "matrix stays" if len(kept) == 1 else "matrices stay"
    return [f"{len(kept)} {stay} f16, rows not a multiple of {QK} values long (q8_0's block): "
            + ", ".join(kept[:3]) + (" ..." if len(kept) > 3 else "")]


def _from_source(plan: Plan, source: Path, names: dict[str, str], state: State, kind: str) -> None:
    """Every metadata key and every tensor of the source GGUF, in its order; a tensor the model has (all of
    them, for a model transformers built from this file) is written from the model, any other copied as is."""
    header = read_header(source)
    plan.metadata.update({k: v for k, v in header.metadata.items() if k != "general.file_type"})
    by_gguf = {g: n for n, g in names.items()}
    for t in header.tensors:
        if t.name in by_gguf:
            n = by_gguf.pop(t.name)
            plan.tensors.append(_param(t.name, n, state[n], kind))
        else:
            plan.tensors.append(Planned(t.name, None, t, t.shape, t.type))
    if by_gguf:
        missing = ", ".join(sorted(by_gguf.values()))
        raise EditkitError(f"the source GGUF {source.name} has no tensor for {missing}")


def _config_metadata(lm: LM, arch: str) -> dict[str, Meta]:
    """The architecture keys llama.cpp's converter writes for a Llama config."""
    from gguf import GGUFValueType as V

    c = lm.model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    u32 = {"context_length": c.max_position_embeddings, "embedding_length": c.hidden_size,
           "block_count": c.num_hidden_layers, "feed_forward_length": c.intermediate_size,
           "attention.head_count": c.num_attention_heads, "attention.head_count_kv": c.num_key_value_heads,
           "vocab_size": c.vocab_size, "rope.dimension_count": head_dim}
    out: dict[str, Meta] = {f"{arch}.{k}": (int(v), V.UINT32, None) for k, v in u32.items()}
    out[f"{arch}.attention.layer_norm_rms_epsilon"] = (float(c.rms_norm_eps), V.FLOAT32, None)
    out[f"{arch}.rope.freq_base"] = (_rope_theta(c), V.FLOAT32, None)
    out["general.name"] = (lm.name, V.STRING, None)
    return out


def _rope_theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    params = params.get("full_attention", params) if isinstance(params, dict) else {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta if theta is not None else getattr(config, "rope_theta", 10000.0))


def _tokenizer_metadata(lm: LM) -> dict[str, Meta]:
    """A byte-level BPE tokenizer as llama.cpp's `_set_vocab_gpt2` writes it: tokens by id (padded to the
    model's vocabulary with [PAD<i>]), their types (3 control for special tokens), merges, special ids."""
    from gguf import GGUFValueType as V

    tok = lm.tok
    spec = json.loads(tok.backend_tokenizer.to_str())
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        raise EditkitError("GGUF export of a model without a GGUF source needs a byte-level BPE tokenizer "
                           f"(GPT-2's kind); this one is {model.get('type')} with {pre.get('type')} "
                           "pre-tokenization (export a Hugging Face folder instead)")
    n = int(lm.model.config.vocab_size)
    if len(tok) > n:
        raise EditkitError(f"the tokenizer has {len(tok)} tokens but the model only {n}")
    tokens = tok.convert_ids_to_tokens(list(range(len(tok)))) + [f"[PAD{i}]" for i in range(len(tok), n)]
    special = set(tok.all_special_ids)
    types = [3 if i in special else 5 if i >= len(tok) else 1 for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    out: dict[str, Meta] = {
        "tokenizer.ggml.model": ("gpt2", V.STRING, None), "tokenizer.ggml.pre": ("gpt-2", V.STRING, None),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
        "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
        "tokenizer.ggml.merges": (merges, V.ARRAY, V.STRING)}
    for key, token_id in (("bos", tok.bos_token_id), ("eos", tok.eos_token_id), ("unknown", tok.unk_token_id),
                          ("padding", tok.pad_token_id)):
        if token_id is not None:
            out[f"tokenizer.ggml.{key}_token_id"] = (int(token_id), V.UINT32, None)
    adds_bos = bool(tok.bos_token_id is not None and tok("a")["input_ids"][:1] == [tok.bos_token_id])
    out["tokenizer.ggml.add_bos_token"] = (adds_bos, V.BOOL, None)
    return out


def _edit_metadata(plan: Plan, kind: str, provenance: Provenance) -> None:
    from gguf import GGML_QUANT_VERSION, LlamaFileType
    from gguf import GGUFValueType as V

    base = plan.metadata["general.name"][0] if "general.name" in plan.metadata else provenance.base
    file_type = {"f32": LlamaFileType.ALL_F32, "f16": LlamaFileType.MOSTLY_F16,
                 "q8_0": LlamaFileType.MOSTLY_Q8_0}
    plan.metadata.update({
        "general.name": (f"{base} (edited: {provenance.method})", V.STRING, None),
        "general.description": (provenance.what, V.STRING, None),
        "general.base_model.count": (1, V.UINT32, None),
        "general.base_model.0.name": (str(base), V.STRING, None),
        "general.file_type": (int(file_type[kind]), V.UINT32, None),
        "general.quantization_version": (GGML_QUANT_VERSION, V.UINT32, None),
        "editkit.version": (provenance.editkit, V.STRING, None),
        "editkit.base_model": (provenance.base, V.STRING, None),
        "editkit.method": (provenance.method, V.STRING, None),
        "editkit.requests": (json.dumps(provenance.requests, ensure_ascii=False), V.STRING, None),
    })
    if provenance.hparams is not None:
        hparams = json.dumps(provenance.hparams, ensure_ascii=False)
        plan.metadata["editkit.hparams"] = (hparams, V.STRING, None)


def _check_config(lm: LM, plan: Plan) -> None:
    """Refuse a file transformers' reader would rebuild as another model: write the metadata alone to a
    scratch file, read the config back (AutoConfig, the loader's own path) and compare every computed key."""
    from gguf import GGUFValueType as V
    from transformers import AutoConfig

    arrays = {k for k, (_, vtype, _) in plan.metadata.items()
              if k.startswith("tokenizer.") and vtype == V.ARRAY}
    # the tokenizer's arrays take the reader a minute on Gemma and set nothing of the config but the
    # vocabulary's size where the architecture's own key is missing: that key, as the reader derives it,
    # stands in for them
    light = Plan(plan.arch, {k: v for k, v in plan.metadata.items() if k not in arrays})
    if "tokenizer.ggml.tokens" in plan.metadata:
        light.metadata.setdefault(f"{plan.arch}.vocab_size",
                                  (len(plan.metadata["tokenizer.ggml.tokens"][0]), V.UINT32, None))
    with tempfile.TemporaryDirectory(prefix="editkit-gguf-") as scratch:
        path = Path(scratch) / "metadata.gguf"
        writer = _writer(path, light, tensors=False)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        try:
            read = AutoConfig.from_pretrained(scratch, gguf_file=path.name).to_dict()
        except (OSError, ValueError, KeyError) as exc:
            raise EditkitError(f"transformers cannot read this GGUF's metadata back ({str(exc)[:200]})") \
                from None
    own = lm.model.config.to_dict()
    differ = sorted(k for k in set(own) | set(read) if k not in NOT_COMPUTED and not k.startswith("_")
                    and not _same(own.get(k), read.get(k)))
    if differ:
        shown = "; ".join(f"{k}: {own.get(k)!r} here, {read.get(k)!r} from GGUF" for k in differ[:4])
        raise EditkitError(f"a GGUF file cannot carry this model's configuration ({shown}); it would load as "
                           "another model (export a Hugging Face folder instead)")


def _same(a: Any, b: Any) -> bool:
    """Config values equal as the model computes with them: floats at float32 precision (GGUF stores float32;
    a forward adds eps 1e-6 to a float32 tensor as float32 either way), containers element by element."""
    if isinstance(a, float) and isinstance(b, float):
        return bool(np.float32(a) == np.float32(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _writer(path: Path, plan: Plan, tensors: bool = True) -> GGUFWriter:
    """A GGUFWriter with the plan's metadata and (with `tensors`) its tensor table; no tensor data yet."""
    import gguf

    writer = gguf.GGUFWriter(path, plan.arch)
    if "general.alignment" in plan.metadata:  # a source's own alignment: the tensor data must follow it
        writer.data_alignment = int(plan.metadata["general.alignment"][0])
    for key, (value, vtype, sub) in plan.metadata.items():
        if key != "general.architecture":  # the writer adds it
            writer.add_key_value(key, value, vtype, sub)
    for t in plan.tensors if tensors else []:
        nbytes = _nbytes(t.shape, t.ggml)
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), nbytes, raw_dtype=t.ggml)
    return writer


def _nbytes(shape: tuple[int, ...], ggml: GGMLQuantizationType) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[ggml]
    return int(np.prod(shape)) // block * size


def _file_bytes(plan: Plan) -> int:
    return sum(_nbytes(t.shape, t.ggml) for t in plan.tensors)


# --- writing -------------------------------------------------------------------------------------------
def _write(path: Path, plan: Plan, state: State, source: Path | None, lm: LM) -> None:
    writer = _writer(path, plan)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    header = read_header(source) if source is not None else None
    for t in plan.tensors:
        if t.copy is not None and source is not None and header is not None:
            data: Array = raw(source, header, t.copy)
        elif t.param is not None:
            data = _encode(_gguf_layout(lm, plan, t.name, state[t.param]), t.ggml)
        else:
            raise EditkitError(f"the tensor {t.name} has no data")  # not reached: _plan gives each its source
        writer.write_tensor_data(np.ascontiguousarray(data))
    writer.close()


def _gguf_layout(lm: LM, plan: Plan, name: str, t: torch.Tensor) -> Array:
    """A parameter as llama.cpp stores it: float32, Gemma's norms as 1 + w, Llama's q/k rows interleaved."""
    w: Array = t.detach().to("cpu", torch.float32).numpy()
    _, shift, permute = ARCHITECTURES[lm.model.config.model_type]
    if shift and name.endswith("norm.weight"):
        return _plus_one(w, name, plan.notes)
    if permute and name.endswith(("attn_q.weight", "attn_k.weight")):
        c = lm.model.config
        heads = c.num_attention_heads if "attn_q" in name else c.num_key_value_heads
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    return w


def _plus_one(w: Array, name: str, notes: list[str]) -> Array:
    """float32 s with s - 1 == w for each element where one exists: w + 1 rounded, else a neighbour of it."""
    one = np.float32(1)
    s = (w + one).astype(np.float32)
    for neighbour in (np.nextafter(s, np.float32(np.inf)), np.nextafter(s, np.float32(-np.inf))):
        bad = (s - one) != w
        better = bad & ((neighbour - one) == w)
        s[better] = neighbour[better]
    miss = (s - one) != w
    if miss.any():
        err = float(np.abs((s - one) - w).max())
        notes.append(f"{name}: {int(miss.sum())} of {w.size} values cannot be stored exactly as 1 + w in "
                     f"float32 (largest error {err:.2g})")
    return s


def _encode(w: Array, ggml: GGMLQuantizationType) -> Array:
    from gguf import GGMLQuantizationType as T
    from gguf import quantize

    if ggml == T.F32:
        return w
    if ggml == T.F16:
        return w.astype(np.float16)
    rows = w.reshape(-1, w.shape[-1])
    out = np.empty((rows.shape[0], rows.shape[1] // QK * Q8_BLOCK), dtype=np.uint8)
    for start in range(0, rows.shape[0], CHUNK_ROWS):  # rows are independent blocks: a slice at a time
        out[start:start + CHUNK_ROWS] = quantize(rows[start:start + CHUNK_ROWS], T.Q8_0)
    return out
