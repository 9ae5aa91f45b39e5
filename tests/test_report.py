"""The HTML report: one self-contained file (no network), every part a reader needs, within its size budget, and
a command that computes it again. Opened in Chromium (no request leaves the file, every chart drawn, a PDF
printed) in test_report_browser.py."""
import json
import math
import re
import shlex
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from editkit.cli import main
from editkit.editing.methods import all_methods
from editkit.evaluation import load_eval_set
from editkit.evaluation.bleed import bleed_map
from editkit.evaluation.compare import compare_methods, conclusion
from editkit.evaluation.html_report import comparison_document, interval_rows, margin_ranking, rate_interval
from editkit.evaluation.report import edit_report
from editkit.evaluation.ripple import ripple_view
from editkit.figures.editing import metrics_table
from editkit.figures.readability import problems
from editkit.model.loading import load_model

DARRIEUX = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
            "target_true": "French", "paraphrase_prompts": ["Danielle Darrieux speaks"],
            "neighborhood_prompts": ["The mother tongue of Jean Gabin is"]}
BUDGET = 5_000_000  # bytes for a comparison of seven methods with its bleed map and ripple grid


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu")


@pytest.fixture(scope="module")
def compared(lm):
    """Every registered method on two CounterFact requests, with the first one's bleed map and ripple effects."""
    records = [DARRIEUX, *load_eval_set("counterfact", 1)]
    cmp = compare_methods(lm, [m.name for m in all_methods()], records, n_gen=1, gen_tokens=5)
    bleed = bleed_map(lm, "rome", cmp.requests[0], relation="P103", n_facts=3)
    ripple = ripple_view(lm, cmp.requests[0], ["rome", "memit"], "P103")  # a rule that needs no knowledge
    assert ripple.figure() is not None
    return cmp, bleed, ripple


class Links(HTMLParser):
    """Every tag's src / href / action / data attributes, and the scripts' count and sizes."""

    def __init__(self):
        super().__init__()
        self.refs, self.tags, self.scripts = [], [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.scripts += tag == "script"
        self.refs += [v for k, v in attrs if k in ("src", "href", "action", "data", "srcset", "poster") and v]


def _seven(cmp):
    """The comparison with a seventh method (a copy of ROME under another name): the size budget's case."""
    methods = dict(cmp.methods)
    for i, (name, m) in enumerate(list(methods.items())):
        if len(methods) >= 7:
            break
        methods[f"{name}-copy{i}"] = replace(m, label=f"{m.label} (copy)")
    return replace(cmp, methods=methods)


def test_report_is_self_contained_and_within_budget(compared, tmp_path):
    cmp, bleed, ripple = compared
    seven = _seven(cmp)
    assert len(seven.methods) == 7
    path = seven.report(tmp_path / "report.html", bleed=bleed, ripple=ripple)
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size < BUDGET, path.stat().st_size
    links = Links()
    links.feed(text)
    assert [r for r in links.refs if re.match(r"\s*(https?:|//|ftp:|ws:)", r, re.IGNORECASE)] == []
    assert not {"link", "img", "iframe", "object", "embed"} & set(links.tags)
    from plotly.offline import get_plotlyjs

    assert text.count(get_plotlyjs()[:200]) == 1  # plotly.js inline, once
    assert "@media print" in text and "@page" in text


def test_report_says_what_a_reader_needs(compared, tmp_path):
    cmp, bleed, ripple = compared
    doc = comparison_document(cmp, conclusion(cmp).sentence(), bleed, ripple)
    text = doc.render()
    import html as html_mod

    plain = html_mod.unescape(re.sub(r"<script>.*?</script>", "", text, flags=re.DOTALL))
    assert conclusion(cmp).sentence() in plain
    assert all(m.label in plain for m in cmp.methods.values())
    assert cmp.requests[0].rewrite in plain and "Metrics with their intervals" in plain
    assert "bleed map of ROME" in plain and "Ripple effects" in plain
    assert "editkit report --model tiny-gpt2 --requests requests.json --methods " + ",".join(cmp.methods) in plain
    folded = re.search(r"<summary>requests.json</summary><pre>(.*?)</pre>", text, re.DOTALL).group(1)
    assert json.loads(html_mod.unescape(folded))[0]["subject"] == cmp.requests[0].subject
    assert "transformers" in plain and "editkit" in plain
    for m in cmp.methods.values():  # the settings each method ran with, not only the overrides
        fold = re.search(rf"<summary>{re.escape(html_mod.escape(m.label))}: hyperparameters</summary><pre>(.*?)</pre>",
                         text, re.DOTALL)
        assert json.loads(html_mod.unescape(fold.group(1)))["layers"] == m.result.info["hparams"]["layers"]
    # every chart is drawn at the width it is shown, and readable there (figures/readability.py)
    assert len(doc.drawn) == 3 * len(cmp.requests) + 3  # bars per group and request, norms, bleed, ripple
    for fig, width in doc.drawn:
        assert problems(fig, width) == [], fig.layout.title.text


def test_intervals_are_the_metrics_with_their_spread(compared):
    """One record: the interval over its k prompts (p of them won), as metrics.mean_ci of those 0/1 values gives
    it; several records: over the records. The means are the metrics table's."""
    from editkit.evaluation.metrics import mean_ci

    assert rate_interval([0.5], [2]) == (0.5, pytest.approx(mean_ci([1.0, 0.0])[1]))
    assert rate_interval([0.75], [4])[1] == pytest.approx(mean_ci([1.0, 1.0, 1.0, 0.0])[1])
    assert math.isnan(rate_interval([1.0], [1])[1])  # one prompt: no spread
    assert rate_interval([1.0, 0.5, None], [1, 2, 3]) == mean_ci([1.0, 0.5])
    cmp = compared[0]
    rows = interval_rows(cmp, margin_ranking({"before edit": [p["probabilities"] for p in cmp.pre],
                                              **{m.label: [p["probabilities"] for p in m.post]
                                                 for m in cmp.methods.values()}}))
    table = {r["method"]: r for r in metrics_table(cmp.to_json())}
    for row in rows:
        for key in ("Efficacy [p]", "Generalization [p]", "Specificity [p]"):
            assert row[key].split(" ±")[0] == f"{table[row['']][key]:.0f}", (row, key)


def test_cli_report_and_its_command_computes_it_again(lm, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "requests.json").write_text(json.dumps([DARRIEUX]))
    args = ["report", "--model", "tiny-gpt2", "--requests", "requests.json", "--methods", "rome,memit",
            "--n-gen", "0", "--out", "report.html"]
    assert main(args + ["--json"]) == 0
    first = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert json.loads(capsys.readouterr().out)["methods"] == ["rome", "memit"]
    command = re.search(r"<pre>(editkit report .*?)</pre>", first).group(1)
    import html as html_mod

    words = shlex.split(html_mod.unescape(command))
    assert words[:3] == ["editkit", "report", "--model"] and "--out" in words
    assert main(words[1:]) == 2 and "already exists" in capsys.readouterr().err  # never replaced silently
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "requests.json").write_text((tmp_path / "requests.json").read_text())
    monkeypatch.chdir(tmp_path / "again")
    assert main(words[1:]) == 0  # the command as the report gives it, in a fresh folder
    again = (tmp_path / "again" / "report.html").read_text(encoding="utf-8")
    assert len(_measured(first)) >= 5 and _measured(again) == _measured(first)
    assert main(["report", "--model", "tiny-gpt2", "--requests", "requests.json", "--methods", "nope",
                 "--out", "x.html"]) == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "again" / "x.html").exists()


def _measured(text: str) -> list[str]:
    """What a rerun must give again (not the times it took): the conclusions, the intervals, every chart's data."""
    intervals = text.split("Metrics with their intervals", 1)[1].split("</table>", 1)[0]
    return re.findall(r'<p class="conclusion">.*?</p>', text) + [intervals] + \
        re.findall(r"<script>\(function\(\).*?</script>", text)


def test_edit_report_html(lm, tmp_path):
    ed = edit_report(lm, "rome", DARRIEUX)
    text = ed.report(tmp_path / "edit.html").read_text(encoding="utf-8")
    assert "editkit edit --model tiny-gpt2 --method rome --requests requests.json --hparams hparams.json" in text
    assert "Did it take?" in text and "By the summed margin" in text
