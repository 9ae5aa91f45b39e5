"""Where editkit keeps things: the shipped assets and the on-disk cache.

In a checkout (or an editable install) the assets are the repository's `assets/` folder; an installed wheel carries
them inside the package as `editkit/assets/` (pyproject.toml maps the one onto the other)."""
import os
from pathlib import Path

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
