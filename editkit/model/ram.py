"""RAM estimates' pieces: how much memory a model's weights need and whether they fit, decided before any
weight is loaded; and the bytes of the tensors a long job holds (below).

    fp = footprint(config, "bfloat16")     # parameters (weights' headers or a meta-device model) x bytes
    fp.check(device, name)                  # EditkitError with the numbers when it does not fit; else a message
    device_map(config, fp)                  # None: one device; else accelerate's map over several GPUs

The parameters are counted from the safetensors headers of the weights when they are on this machine (every
tensor's shape is there; `safetensors_parameters`), else on a model built from the config on PyTorch's meta
device (shapes only, no memory); tied embeddings count once either way. A load needs the weights plus a margin
(`OVERHEAD`: activations of short prompts, buffers, the tokenizer); editing adds the statistics C (d_ff x
d_ff floats per edited layer) and tracing a batch of `samples + 1` prompts, both small beside the weights of a
large model.

A long job's working memory (what a served app's queue admits within its budget, editkit/runtime/jobs.py) is built
from the same dimensions: `step_bytes` (a forward's live activations in one block), `graph_bytes` (what autograd
keeps of a forward for its backward), `vocab_bytes` (rows of logits over the vocabulary) and `matrix_bytes`
(d_ff x d_ff statistics). The algorithms combine them (tracing/ram.py, editing/ram.py); `MARGIN` covers the
allocator's slack and the temporaries the sums leave out (measured peaks: docs/results/serving.md).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import EditkitError

OVERHEAD = 1.2  # what a load needs beyond the weights themselves
GB = 1e9
MARGIN = 1.5  # a job's estimate over the sum of its large tensors (allocator slack, temporaries)
MAX_HEADER = 100 * 2 ** 20  # the safetensors format's own limit on a header


def safetensors_parameters(files) -> int:
    """The parameter count of a checkpoint from its safetensors files' headers alone: each file begins with
    the length of a JSON table (8 bytes, little-endian) that gives every tensor's shape; no tensor is read.
    transformers saves a tied weight once, so it counts once, as on the model."""
    total = 0
    for path in files:
        try:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if not 2 <= size <= MAX_HEADER:
                    raise ValueError(f"a header of {size} bytes")
                table = json.loads(f.read(size))
            total += sum(math.prod(t["shape"]) for key, t in table.items() if key != "__metadata__")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise EditkitError(f"{path} is not a readable safetensors file ({why})") from None
    return total


def safetensors_files(where: str | Path) -> list[Path] | None:
    """The safetensors files of a checkpoint when all of them are on this machine: a folder's, or a hub id's
    in the local Hugging Face cache (an index's shards, or model.safetensors); None when it has none here
    (weights in another format, or not downloaded yet)."""
    folder = Path(where).expanduser()
    if folder.is_dir():
        def find(name: str) -> Path | None:
            return folder / name if (folder / name).is_file() else None
    else:
        from huggingface_hub import try_to_load_from_cache

        def find(name: str) -> Path | None:
            try:
                hit = try_to_load_from_cache(str(where), name)
            except ValueError:  # not a valid hub id
                return None
            return Path(hit) if isinstance(hit, str) else None
    index = find("model.safetensors.index.json")
    if index is None:
        single = find("model.safetensors")
        return [single] if single is not None else None
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise EditkitError(f"{index} is not a readable safetensors index ({why})") from None
    files = [find(shard) for shard in shards]
    return files if files and all(f is not None for f in files) else None  # type: ignore[return-value]


def count_parameters(config, trust_remote_code: bool = False) -> int:
    """The model's parameter count from its config alone (a meta-device model: no memory, tied weights once)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class Footprint:
    """A model's weights in one dtype."""

    parameters: int
    dtype: torch.dtype

    @property
    def bytes(self) -> int:
        return self.parameters * torch.empty((), dtype=self.dtype).element_size()

    @property
    def needed(self) -> int:
        """What a load needs: the weights plus OVERHEAD."""
        return int(self.bytes * OVERHEAD)

    def describe(self) -> str:
        """'134.5 M parameters x 2 bytes (bfloat16) = 0.27 GB'."""
        size = torch.empty((), dtype=self.dtype).element_size()
        count = f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e9 else f"{self.parameters / 1e6:.1f} M"
        return f"{count} parameters x {size} bytes ({dtype_name(self.dtype)}) = {gigabytes(self.bytes)}"

    def check(self, device: torch.device, name: str, free: int | None = None) -> str:
        """A one-line estimate for progress messages, or an EditkitError with the numbers when the weights (plus
        OVERHEAD) exceed the free memory of `device` (RAM for the CPU, the GPU's free memory for CUDA)."""
        free, where = available(device) if free is None else (free, _where(device))
        line = f"{name}: {self.describe()}; {where} free: {gigabytes(free)}"
        if self.needed <= free:
            return line
        hint = ""
        if self.dtype == torch.float32:
            half = Footprint(self.parameters, torch.bfloat16)
            hint = f"; in bfloat16 it would need {gigabytes(half.needed)} (--dtype bfloat16)"
        raise EditkitError(f"{name} does not fit: {self.describe()}, about {gigabytes(self.needed)} with "
                           f"activations and buffers, but only {gigabytes(free)} of {where} is free{hint}")


def gigabytes(n: float) -> str:
    """'0.54 GB', or '2.4 MB' below 0.1 GB."""
    return f"{n / GB:.2f} GB" if n >= 0.1 * GB else f"{n / 1e6:.1f} MB"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _where(device: torch.device) -> str:
    return "RAM" if device.type == "cpu" else f"GPU {device.index or 0} memory"


def available(device: torch.device) -> tuple[int, str]:
    """(free bytes, what they are) on `device`: the system's available RAM, or the GPU's free memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device.index or 0)
        return int(free), _where(device)
    try:
        import psutil

        return int(psutil.virtual_memory().available), "RAM"
    except ImportError:  # Linux without psutil
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024, "RAM"


def device_map(config, fp: Footprint, name: str, free: dict[int, int] | None = None,
               plan=None) -> dict | None:
    """None when the model fits on the first GPU (or there is none); otherwise accelerate's device map over all
    GPUs (`infer_auto_device_map`, whole decoder blocks per device). A model that fits on no combination of GPUs
    without offloading to the CPU or disk is refused with the numbers (offloaded weights are not real tensors,
    which edits and hooks need). `free` and `plan` replace the measured free memory and accelerate (tests)."""
    if free is None:
        if not torch.cuda.is_available():
            return None
        free = {i: int(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())}
    if fp.needed <= free[min(free)]:
        return None
    total = sum(free.values())
    if fp.needed > total:
        raise EditkitError(f"{name} does not fit: {fp.describe()}, about {gigabytes(fp.needed)} with activations "
                           f"and buffers, but the {len(free)} GPU(s) have {gigabytes(total)} free together")
    mapping = (plan or _accelerate_plan)(config, fp, {i: int(f / OVERHEAD) for i, f in free.items()})
    if any(not isinstance(d, int) for d in mapping.values()):
        raise EditkitError(f"{name} does not fit on the GPUs without offloading weights to the CPU or disk "
                           f"({fp.describe()}; free: {', '.join(f'GPU {i} {gigabytes(f)}' for i, f in free.items())})")
    return mapping


def _accelerate_plan(config, fp: Footprint, max_memory: dict[int, int]) -> dict:
    from accelerate import infer_auto_device_map
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return infer_auto_device_map(model, max_memory=max_memory, dtype=fp.dtype,
                                 no_split_module_classes=list(getattr(model, "_no_split_modules", None) or []))


# --- a long job's working memory ------------------------------------------------------------------------------
def _act(lm) -> int:
    """Bytes of one activation value (the model's dtype; half precision halves the activations)."""
    return torch.empty((), dtype=next(lm.model.parameters()).dtype).element_size()


def step_bytes(lm, row_positions: int) -> int:
    """Live activations of a forward step through one block over `row_positions` (rows x positions) without
    autograd: the residual in and out, attention's queries, keys, values and output, and the MLP's gate, up and
    activated hidden units (3 x d_ff + 8 x d_model values per row-position)."""
    a = lm.adapter
    return int(row_positions) * (3 * a.d_ff + 8 * a.d_model) * _act(lm)


def graph_bytes(lm, row_positions: int, layers: int) -> int:
    """What autograd keeps of a forward over `layers` blocks for a backward: every block's inputs of its linear
    maps, norms and nonlinearities (about 4 x d_ff + 12 x d_model values per row-position and block)."""
    a = lm.adapter
    return int(row_positions) * int(layers) * (4 * a.d_ff + 12 * a.d_model) * _act(lm)


def capture_bytes(lm, row_positions: int, layers: int | None = None) -> int:
    """Hidden units (d_ff values) captured at `layers` layers (default: all) for `row_positions` row-positions,
    float32 (the memory analyses read every layer's MLP keys in one forward)."""
    layers = lm.adapter.n_layers if layers is None else layers
    return int(row_positions) * int(layers) * lm.adapter.d_ff * 4


def vocab_bytes(lm, rows: int, copies: int = 2) -> int:
    """`rows` rows of float32 logits over the vocabulary, `copies` times (the logits and their softmax or
    gradient)."""
    return int(rows) * lm.adapter.vocab_size * 4 * copies


def matrix_bytes(lm, count: int = 1) -> int:
    """`count` float32 d_ff x d_ff matrices (key statistics C, their inverse, AlphaEdit's projection)."""
    return int(count) * lm.adapter.d_ff ** 2 * 4


def with_margin(n_bytes: float) -> int:
    return int(n_bytes * MARGIN)
