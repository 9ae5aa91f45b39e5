"""What every typed result shares: JSON in and out, a pandas table, and how a notebook shows it.

    tr = editkit.trace(lm, prompt, subject)      # any result: a dataclass with
    tr.to_json()                                 # the JSON object the caches, Ray and `--json` write (a dict)
    type(tr).from_json(d)                        # back from that dict, JSON text or a .json file
    tr.save("trace.json")                        # the same JSON in a file
    tr.to_frame()                                # a pandas DataFrame (long format: one row per number)
    tr.figure()                                  # the plotly figure the pages draw (editkit/figures/)

In Jupyter a result shows itself (`_repr_mimebundle_`): its figure (offline: figures/notebook.py), or its
table where a table says more (an edit). `Batch` holds the results of one call on several prompts. Results
live in the package that computes them; their figures come from editkit/figures/, which reads the JSON form or
the result's attributes, never the other way round.
"""
from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable
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
        """Jupyter's view as HTML: the headline, then the figure (offline HTML: FIGURE_BUNDLE) or the table;
        the headline alone when there is neither (a ripple test that derived no fact: it says why)."""
        html_text: str = self._repr_mimebundle_()["text/html"]
        return html_text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """What Jupyter shows: a figure as plotly's own mimetype (JupyterLab draws it with its own plotly.js)
        and as HTML that draws with no network (figures/notebook.py: plotly.js inline once per kernel); a
        table as HTML. text/plain is the headline."""
        text = f"{type(self).__name__}: {self.headline()}"
        fig = self.figure() if self._show == "figure" else None
        if fig is not None and FIGURE_BUNDLE is not None:
            bundle = dict(FIGURE_BUNDLE(fig))
            bundle["text/html"] = self._head() + bundle["text/html"]
            return {**bundle, "text/plain": text}
        if fig is not None:  # no figures package imported (cannot happen for a result that has a figure)
            return {"text/html": self._head() + fig.to_html(full_html=False, include_plotlyjs=True),
                    "text/plain": text}
        table = self.to_frame()
        body = "" if not len(table) else table.to_html(index=False, float_format=lambda x: f"{x:.4g}")
        return {"text/html": self._head() + body, "text/plain": text}


# figures/notebook.py sets this when the figures package is imported (core imports nothing above it):
# figure -> {mimetype: ..., "text/html": ...}
FIGURE_BUNDLE: Callable[[Any], dict[str, Any]] | None = None


class Batch(list[Any]):
    """The results of one call on several prompts (a list, in the prompts' order): `to_frame()` stacks their
    tables with the prompt's index and text in front, `to_json()` is the list of their JSON objects, and a
    notebook shows each result in turn."""

    def __init__(self, items: Iterable[Any], prompts: list[str]) -> None:
        super().__init__(items)
        self.prompts = list(prompts)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        parts = []
        for i, (prompt, item) in enumerate(zip(self.prompts, self)):
            table = item.to_frame()
            table.insert(0, "prompt", prompt)
            table.insert(0, "prompt_index", i)
            parts.append(table)
        return pd.concat(parts, ignore_index=True) if parts else frame([])

    def to_json(self) -> list[JsonObject]:
        return [item.to_json() for item in self]

    def headline(self) -> str:
        return f"{len(self)} results"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        html = "".join(item._repr_mimebundle_()["text/html"] for item in self)
        text = "\n".join(f"{type(item).__name__}: {item.headline()}" for item in self)
        return {"text/html": html, "text/plain": text}


def json_of(result: Result | JsonObject) -> JsonObject:
    """A typed result's JSON form (a dict as it is: a cached or --json result), for readers written against the
    JSON edge: figures and summaries take either, so no page converts a result to draw it."""
    return result.to_json() if isinstance(result, Result) else result


def jsons_of(results: dict[str, Result | JsonObject]) -> dict[str, JsonObject]:
    """json_of for each value of a name -> result mapping."""
    return {name: json_of(r) for name, r in results.items()}
