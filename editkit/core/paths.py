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
