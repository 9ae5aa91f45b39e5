"""What every typed result shares: JSON in and out, a pandas table, and how a notebook shows it.

    tr = editkit.trace(lm, prompt, subject)      # any result: a dataclass with
    tr.to_json()                                 # the JSON object the caches, Ray and `--json` write (a dict)
    type(tr).from_json(d)                        # back from that dict, JSON text or a .json file
    tr.save("trace.json")                        # the same JSON in a file
    tr.to_frame()                                # a pandas DataFrame (long format: one row per number)
    tr.figure()                                  # the plotly figure the pages draw (editkit/figures/)

In Jupyter a result shows itself (`_repr_html_`): its figure, or its table where a table says more (an edit).
Results live in the package that computes them; their figures come from editkit/figures/, which reads the JSON
form or the result's attributes, never the other way round.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EditkitError

if TYPE_CHECKING:
    import pandas as pd

JsonObject = dict[str, Any]  # what to_json() returns: a result's JSON form, the edge where dicts belong


def json_input(data: Any) -> Any:
    """The JSON value of `data`: a dict or list as is, JSON text parsed, or a path read (a .json file)."""
    if isinstance(data, (dict, list)):
        return data
    if isinstance(data, str) and data.lstrip().startswith(("{", "[")):
        try:
            return json.loads(data)
        except ValueError as exc:
            raise EditkitError(f"not valid JSON: {exc}") from None
    if isinstance(data, (str, Path)):
        path = Path(data)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EditkitError(f"cannot read {str(path)[:200]}: {exc}") from None
    raise EditkitError(f"expected a JSON object, JSON text or a path, not {type(data).__name__}")


def frame(rows: list[Any], columns: list[str] | None = None) -> pd.DataFrame:
    """A pandas DataFrame of row dicts. pandas is imported here, when a table is asked for: the pages' imports and
    Ray workers that never build one do not pay its 0.35 s."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


class Result:
    """The mixin of every typed result: subclasses define `to_json()` and `_from_json(d)`, and `figure()` and
    `to_frame()` where they have them. `_show` says what a notebook shows: "figure" or "table"."""

    _show = "figure"

    def to_json(self) -> JsonObject:
        """The JSON object of this result (a dict of plain values), exactly as the caches and `--json` write it."""
        raise NotImplementedError

    @classmethod
    def _from_json(cls, d: JsonObject) -> Any:
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: Any) -> Any:
        """The result `to_json()` wrote: its dict, JSON text or a .json file. A JSON object of another kind is one
        EditkitError naming what is missing."""
        d = json_input(data)
        if not isinstance(d, dict):
            raise EditkitError(f"{cls.__name__}.from_json expects a JSON object, not a {type(d).__name__}")
        try:
            return cls._from_json(d)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise EditkitError(f"this JSON holds no {cls.__name__} ({type(exc).__name__}: {exc})") from None

    def save(self, path: str | Path) -> Path:
        """Write to_json() to `path` (UTF-8 JSON); `from_json(path)` reads it back."""
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=1), encoding="utf-8")
        return path

    def figure(self) -> Any:  # a plotly Figure (editkit/figures/), or None where there is none
        raise NotImplementedError(f"{type(self).__name__} has no figure")

    def to_frame(self) -> pd.DataFrame:
        raise NotImplementedError(f"{type(self).__name__} has no table")

    def headline(self) -> str:
        """One line about the result, shown above its table or figure in a notebook."""
        return type(self).__name__

    def _head(self) -> str:
        return f"<p><b>{html.escape(type(self).__name__)}</b>: {html.escape(self.headline())}</p>"

    def _repr_html_(self) -> str:
        """Jupyter's view as HTML: the headline, then the figure (plotly's HTML for its configured renderer) or
        the table; the headline alone when there is neither (a ripple test that derived no fact: it says why)."""
        fig = self.figure() if self._show == "figure" else None
        if fig is not None:
            return self._head() + str(fig._repr_html_())
        table = self.to_frame()
        if not len(table):
            return self._head()
        return self._head() + str(table.to_html(index=False, float_format=lambda x: f"{x:.4g}"))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """What Jupyter shows: a figure also as plotly's own mime type, which JupyterLab draws without the
        internet (the HTML form may load plotly.js from its CDN); a table as HTML. text/plain is the headline."""
        fig = self.figure() if self._show == "figure" else None
        if fig is None:
            return {"text/html": self._repr_html_(), "text/plain": f"{type(self).__name__}: {self.headline()}"}
        bundle = dict(fig._repr_mimebundle_())
        bundle["text/html"] = self._head() + (bundle.get("text/html") or fig._repr_html_())
        bundle["text/plain"] = f"{type(self).__name__}: {self.headline()}"
        return bundle
