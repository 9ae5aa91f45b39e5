"""Edit & compare's ways out: the report download (below the ripple effects) and the edited model's download
(under the results) are drawn for a comparison, and what they build is a report and a loadable GGUF."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from editkit.evaluation import load_eval_set
from editkit.evaluation.compare import compare_methods
from editkit.model.loading import load_model

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_report_and_model_downloads_are_offered(tmp_path):
    lm = load_model("tiny-llama", device="cpu")
    cmp = compare_methods(lm, ["rome"], load_eval_set("counterfact", 1), n_gen=0)
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-llama"
    at.session_state["ec_out"] = cmp
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    keys = [b.proto.id for b in at.get("download_button")]
    assert any("ec_report" in k for k in keys) and any("ec_export_go" in k for k in keys), keys
    assert at.selectbox(key="ec_export_method").options == ["ROME"]
    assert len(at.selectbox(key="ec_export_kind").options) == 4  # a Llama: the three GGUF types and the folder
    assert any(m.value.startswith("One HTML file of this comparison") for m in at.markdown)
    # what the model button builds: the compared method's edit on the page's model, as GGUF
    out = cmp.export_gguf("rome", tmp_path / "rome.gguf", lm, "q8_0")
    assert out.bytes > 0 and (tmp_path / "rome.gguf").exists()
