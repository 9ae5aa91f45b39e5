"""Where editkit keeps things: the shipped assets and the on-disk cache.

In a checkout (or an editable install) the assets are the repository's `assets/` folder; an installed wheel carries
them inside the package as `editkit/assets/` (pyproject.toml maps the one onto the other)."""
import os
from pathlib import Path

from .errors import EditkitError

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent  # the checkout (git commands of the lesson pack's provenance run here)
ASSETS = PACKAGE / "assets" if (PACKAGE / "assets").is_dir() else ROOT / "assets"
DATA = ASSETS / "data"
HPARAMS = ASSETS / "hparams"


def cache_dir(*parts: str) -> Path:
    """The cache folder ($EDITKIT_CACHE, default ~/.cache/editkit), created on demand."""
    base = Path(os.environ.get("EDITKIT_CACHE") or Path.home() / ".cache" / "editkit")
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def safe_name(name: str) -> str:
    """A model id or path as a single folder name ("google/gemma" -> "google--gemma")."""
    keep = [c if (c.isalnum() or c in "-_.") else "-" for c in name.strip().strip("/").replace("/", "--")]
    return "".join(keep)[:120] or "model"


def new_file(path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """The resolved path of a file about to be written (a report, a GGUF), or an EditkitError saying why it
    cannot be: it is a folder, its folder is missing or not writable, or it exists and `overwrite` was not
    asked for (nothing a user made is replaced silently). Checked before the work that fills it."""
    target = Path(path).expanduser()
    if not target.name or target.name in (".", ".."):
        raise EditkitError(f"'{path}' is not a file name")
    resolved = target.resolve()
    if resolved.is_dir():
        raise EditkitError(f"{path} is a folder; give a file name")
    if not resolved.parent.is_dir():
        raise EditkitError(f"{path}: the folder {resolved.parent} does not exist")
    if not os.access(resolved.parent, os.W_OK | os.X_OK):
        raise EditkitError(f"{path}: the folder {resolved.parent} is not writable")
    if resolved.exists() and not overwrite:
        raise EditkitError(f"{path} already exists; give another name, or replace it with --overwrite "
                           "(overwrite=True in Python)")
    return resolved


def new_folder(path: str | os.PathLike[str]) -> Path:
    """The resolved path of a folder about to be filled (a Hugging Face export), or an EditkitError: it exists
    and is not an empty folder (never emptied for you), or its parent is missing or not writable."""
    target = Path(path).expanduser()
    if not target.name or target.name in (".", ".."):
        raise EditkitError(f"'{path}' is not a folder name")
    resolved = target.resolve()
    if resolved.exists() and (not resolved.is_dir() or any(resolved.iterdir())):
        raise EditkitError(f"{path} already exists and is not an empty folder; choose a new folder")
    if not resolved.parent.is_dir():
        raise EditkitError(f"{path}: the folder {resolved.parent} does not exist")
    if not os.access(resolved.parent, os.W_OK | os.X_OK):
        raise EditkitError(f"{path}: the folder {resolved.parent} is not writable")
    return resolved


def read_user_file(path: str | Path, what: str) -> str:
    """The text (UTF-8) of a file a user named, or one line naming `what` (e.g. "records file"): "no ... at
    '<name>'" when there is no such file (also for a name too long or with a NUL byte), "cannot read the ...
    '<name>': why" when it cannot be read or is not UTF-8 (the name cut to 200 characters)."""
    shown = repr(str(path)[:200])
    p = Path(path)
    try:
        exists = p.is_file()
    except (OSError, ValueError):  # a name too long, or with a NUL byte
        exists = False
    if not exists:
        raise EditkitError(f"no {what} at {shown}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EditkitError(f"cannot read the {what} {shown}: {exc}") from None
