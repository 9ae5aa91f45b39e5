"""The model as this context computes with it (base weights + the active edits), written for use elsewhere.

    with weights.applied(lm, delta):
        export_hf(lm, "edited/", provenance)    # config, tokenizer, safetensors, editkit-edit.json
        export_gguf(lm, "edited.gguf", provenance, "q8_0")   # model/gguf_export.py: f32, f16 or q8_0

A Hugging Face folder loads with plain `transformers.AutoModelForCausalLM.from_pretrained`; a GGUF file with
llama.cpp-compatible readers and editkit's own loader (model/loading.py, through transformers' GGUF reader).
The weights written are exactly the ones editkit's forward passes use in this context
(`weights.effective_state`: W + delta formed in float32 and rounded once), so the folder, and a float32 GGUF,
reproduce the in-process edited model bit for bit. `Provenance` names the base model, the edit's method and
requests: a JSON file in the folder, metadata keys in the GGUF.

Safety: every check (the target is not one of the base model's files or folders, free disk space, the working
memory, a format that can hold this model) runs before anything is written; the files are written under a
temporary name beside the target and renamed into place at the end, so an interrupted or failed export leaves
nothing behind. The base model's files are only read.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..core.errors import EditkitError
from ..core.paths import cache_dir, new_file, new_folder
from ..core.results import JsonObject, Result, frame
from .ram import available, gigabytes
from .shipped import SHIPPED

if TYPE_CHECKING:
    import torch

    from .lm import LM

Say = Callable[[str], None]
MARGIN_BYTES = 64 * 2 ** 20  # disk kept free beyond the estimate (filesystem blocks, the tokenizer files)


@dataclass(frozen=True)
class Provenance:
    """What an exported model is: the base model, the method and the requests of the edit (each request's
    JSON), and the editkit version that made it. `what` says it in a line (a GGUF's description)."""

    base: str
    method: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    hparams: dict[str, Any] | None = None
    editkit: str = ""

    def __post_init__(self) -> None:
        if not self.editkit:
            object.__setattr__(self, "editkit", editkit_version())

    @property
    def what(self) -> str:
        rewrites = "; ".join(f"{_rewrite(r)} -> {str(r.get('target_new', '')).strip()}"
                             for r in self.requests[:5])
        more = f" and {len(self.requests) - 5} more" if len(self.requests) > 5 else ""
        return f"{self.base} edited with {self.method} by editkit {self.editkit}: {rewrites}{more}"

    def to_json(self) -> JsonObject:
        return asdict(self)


def _rewrite(request: dict[str, Any]) -> str:
    prompt = str(request.get("prompt", ""))
    return prompt.replace("{}", str(request.get("subject", ""))) if "{}" in prompt else prompt


def editkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("editkit")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class Exported(Result):
    """One export: where it went, its format ("hf" or "gguf") and storage type, its size and what it holds."""

    path: str
    format: str
    type: str  # the dtype of a folder's safetensors; f32, f16 or q8_0 for a GGUF
    bytes: int
    tensors: int
    seconds: float
    provenance: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what is not exact (e.g. a norm weight stored as 1 + w)

    _show = "table"

    def headline(self) -> str:
        return f"{self.format} ({self.type}) at {self.path}: {gigabytes(self.bytes)}, {self.tensors} tensors"

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> Exported:
        return cls(**d)

    def to_frame(self) -> Any:
        return frame([{"path": self.path, "format": self.format, "type": self.type, "bytes": self.bytes,
                       "tensors": self.tensors, "seconds": round(self.seconds, 1)}])


# --- checks before anything is written -----------------------------------------------------------------
def base_paths(lm: LM) -> list[Path]:
    """The base model's own files and folders, which an export must never write into: the folder it was loaded
    from, a GGUF source file, and editkit's model caches."""
    from .folders import gguf_file
    from .loading import split_name

    name = split_name(lm.name)[0]
    paths = [cache_dir("models"), cache_dir("gguf")]
    folder = getattr(lm.model.config, "_name_or_path", "") or ""
    if folder and Path(folder).expanduser().exists():
        paths.append(Path(folder).expanduser())
    if (gguf := gguf_file(name)) is not None:
        paths.append(gguf)
    return [p.resolve() for p in paths]


def check_target(lm: LM, target: Path, folder: bool, overwrite: bool = False) -> Path:
    """The resolved target, or an EditkitError: inside or onto the base model's files, a folder target that
    exists and is not empty, a file target that is a folder or exists (unless `overwrite`), a parent folder
    that is missing or not writable (core/paths.py)."""
    resolved = Path(target).expanduser().resolve()
    for base in base_paths(lm):  # first: --overwrite never reaches the base model's files
        if resolved == base or base in resolved.parents:
            raise EditkitError(f"{target} is inside the base model's files ({base}); export somewhere else")
        if resolved in base.parents:
            raise EditkitError(f"{target} holds the base model's files ({base}); export somewhere else")
    return new_folder(target) if folder else new_file(target, overwrite)


def check_space(target: Path, needed_disk: int, needed_memory: int) -> None:
    """EditkitError before writing when the disk under `target` or the RAM cannot hold the export."""
    free_disk = shutil.disk_usage(target.parent).free
    if needed_disk + MARGIN_BYTES > free_disk:
        raise EditkitError(f"the export needs about {gigabytes(needed_disk)} of disk but {target.parent} has "
                           f"only {gigabytes(free_disk)} free")
    import torch

    free, where = available(torch.device("cpu"))
    if needed_memory > free:
        raise EditkitError(f"the export needs about {gigabytes(needed_memory)} of working memory, but only "
                           f"{gigabytes(free)} of {where} is free")


@contextmanager
def staged(target: Path, folder: bool) -> Iterator[Path]:
    """A temporary file or folder beside `target`, renamed onto it when the block ends without an error and
    removed otherwise: a reader never finds a half-written export under the target's name."""
    try:
        if folder:
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial"))
        else:
            fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
            os.close(fd)
            tmp = Path(name)
    except OSError as exc:
        raise EditkitError(f"cannot write in {target.parent} ({exc.strerror or exc})") from exc
    try:
        yield tmp
        _readable(tmp)
        if folder and target.exists():
            target.rmdir()  # checked empty before; os.replace needs the name free for a folder
        os.replace(tmp, target)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True) if folder else tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, a folder made read-only meanwhile: said in a line
            raise EditkitError(f"writing {target} failed ({exc.strerror or exc}); nothing was left "
                               "behind") from exc
        raise


def _readable(path: Path) -> None:
    """The usual modes (folders 755, files 644): temporary names are created private to their owner."""
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)


def tensor_bytes(state: dict[str, torch.Tensor]) -> tuple[int, int]:
    """(total bytes, largest tensor's bytes) of a state dict, each storage counted once (tied weights)."""
    seen, total, largest = set(), 0, 0
    for t in state.values():
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        n = t.numel() * t.element_size()
        total, largest = total + n, max(largest, n)
    return total, largest


# --- a Hugging Face folder -----------------------------------------------------------------------------
def export_hf(lm: LM, folder: str | Path, provenance: Provenance,
              say: Say = lambda message: None) -> Exported:
    """Write the model as this context sees it into `folder` (new or empty): config.json, the tokenizer's
    files, safetensors in the model's dtype, and editkit-edit.json (the provenance)."""
    from .weights import effective_state

    t0 = time.perf_counter()
    target = check_target(lm, Path(folder), folder=True)
    state = effective_state(lm)
    total, largest = tensor_bytes(state)
    check_space(target, total, largest * 2)  # save_pretrained serializes a shard's tensors one by one
    say(f"writing the edited model to {target} ({gigabytes(total)})")
    with staged(target, folder=True) as tmp:
        lm.model.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        lm.tok.save_pretrained(tmp)
        (tmp / "editkit-edit.json").write_text(json.dumps(provenance.to_json(), indent=1, ensure_ascii=False),
                                               encoding="utf-8")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    dtype = str(lm.dtype).replace("torch.", "")
    return Exported(str(target), "hf", dtype, size, _stored_tensors(target), time.perf_counter() - t0,
                    provenance.to_json())


def _stored_tensors(folder: Path) -> int:
    """How many tensors the folder's safetensors hold (read from their headers; save_pretrained empties the
    state dict it is given, and leaves a tied head out)."""
    from safetensors import safe_open

    count = 0
    for f in folder.glob("*.safetensors"):
        with safe_open(f, framework="pt") as st:
            count += len(list(st.keys()))
    return count


def as_bytes(write: Callable[[Path], object], name: str) -> bytes:
    """The bytes of an export for a download: `write(path)` writes a file or folder `name` into a temporary
    folder; a file is read back, a folder zipped (stored: safetensors do not compress)."""
    import zipfile
    from io import BytesIO

    with tempfile.TemporaryDirectory(prefix="editkit-export-") as scratch:
        target = Path(scratch) / name
        write(target)
        if target.is_file():
            return target.read_bytes()
        buffer = BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
            for f in sorted(target.rglob("*")):
                if f.is_file():
                    z.write(f, f"{name}/{f.relative_to(target)}")
        return buffer.getvalue()


def has_source_gguf(lm: LM) -> bool:
    """Whether the model came from a GGUF file (a shipped model's, fetched on first use, or the user's .gguf),
    said without fetching anything."""
    from .folders import gguf_file
    from .loading import split_name

    name = split_name(lm.name)[0]
    return name in SHIPPED or gguf_file(name) is not None


def source_gguf(lm: LM, say: Say = lambda message: None) -> Path | None:
    """The GGUF file a model was converted from (a shipped model's, or the user's .gguf), else None."""
    from .folders import gguf_file
    from .loading import split_name

    name = split_name(lm.name)[0]
    if name in SHIPPED:
        return SHIPPED[name].gguf(say)
    return gguf_file(name)
