"""Edit & compare's way out: the comparison as one self-contained HTML report (with the bleed map and the
ripple grid of its first request when computed), and one method's edited model as a GGUF file or a zipped
Hugging Face folder."""
import streamlit as st

from editkit.editing.methods import label
from pages import edit_sections as sections
from pages import ui


class K:
    """These widgets' session-state keys, each named once."""

    REPORT, EXPORT_GO = "ec_report", "ec_export_go"
    EXPORT_METHOD, EXPORT_KIND = "ec_export_method", "ec_export_kind"


def _about_first_request(result, out):
    """A bleed map or ripple result of this session, if it is about the comparison's first request."""
    return result if result and result.request.to_dict() == out.requests[0].to_dict() else None


def report_section(out) -> None:
    """The comparison as one self-contained HTML file (evaluation/html_report.py), with the bleed map and the
    ripple grid above when they were computed for its first request; built when the button is pressed. Drawn
    after those sections, so that a map computed in this run is in it."""
    if not out:
        return
    st.subheader("A report to keep or share")
    st.markdown("One HTML file of this comparison that opens in any browser without the internet and prints: "
                "the request, every method's metrics with their 95% intervals, the charts, who did best, the "
                "versions and the command that computes it again.")
    bleed = _about_first_request(st.session_state.get(sections.K.BLEED), out)
    ripple = _about_first_request(st.session_state.get(sections.K.RIPPLE), out)

    def build() -> str:
        from editkit.evaluation.compare import conclusion as sentence
        from editkit.evaluation.html_report import comparison_document

        return comparison_document(out, sentence(out).sentence(), bleed, ripple).render()

    parts = " and ".join(p for p, r in (("the bleed map", bleed), ("the ripple grid", ripple)) if r)
    st.download_button("Download a report (HTML)", build, "edit_compare_report.html", "text/html",
                       key=K.REPORT, on_click="ignore")
    st.caption(f"With {parts} of the first request." if parts else
               "The bleed map and the ripple grid join it once computed above for the first request.")


GGUF_KINDS = {"GGUF q8_0 (llama.cpp, Ollama; smallest)": ("gguf", "q8_0"), "GGUF f16": ("gguf", "f16"),
              "GGUF f32 (exactly the model compared here)": ("gguf", "f32"),
              "Hugging Face folder (.zip, transformers)": ("hf", None)}


def model_download(lm, out) -> None:
    """One method's edited model as a file: GGUF or a zipped Hugging Face folder, built when the button is
    pressed (model/export.py). Only for the server's own browser: the file is held in the server's memory
    while the session lasts; anyone can take the patch (sidebar) and run `editkit export` on their machine."""
    from editkit.model.export import as_bytes

    deltas = [m for m, o in out.methods.items() if o.result.delta]
    if not deltas or out.model != lm.name:
        return
    st.markdown("**Take an edited model out of editkit**")
    if not ui.visitor().local:
        st.caption("Whole models are downloaded from the server's own browser only. Keep the edit, download "
                   "it as a patch (sidebar) and run `editkit export --patch P --gguf edited.gguf` yourself.")
        return
    from editkit.model.export import has_source_gguf
    from editkit.model.gguf_export import refusal

    no_gguf = refusal(lm, has_source_gguf(lm))  # a family GGUF cannot take: the folder alone is offered
    kinds = {k: v for k, v in GGUF_KINDS.items() if no_gguf is None or v[0] == "hf"}
    c1, c2, c3 = st.columns(3)
    method = c1.selectbox("Edited model of", deltas, format_func=label, key=K.EXPORT_METHOD)
    fmt, gguf_type = kinds[c2.selectbox("Format", list(kinds), key=K.EXPORT_KIND)]
    kept = [e["delta"] for e in ui.my_edits(lm)]  # edits act in this thread only: handed to the build
    name = f"{lm.name.replace('/', '--')}-{method}" + (f"-{gguf_type}.gguf" if fmt == "gguf" else "")

    def build() -> bytes:
        from editkit.model import isolation

        with isolation.session(lm, kept):
            if fmt == "gguf":
                return as_bytes(lambda path: out.export_gguf(method, path, lm, gguf_type), name)
            return as_bytes(lambda path: out.export_hf(method, path, lm), name)

    c3.download_button("Download the edited model", build, name + (".zip" if fmt == "hf" else ""),
                       "application/octet-stream", key=K.EXPORT_GO, on_click="ignore")
    st.caption(f"The base model with {label(method)}'s edit"
               + (" and your kept edits" if kept else "") + ": GGUF loads in llama.cpp, Ollama and editkit, "
               "the folder with transformers. f32 is the compared model exactly; f16 and q8_0 are smaller "
               "and round its weights (the manual's \"Take an edit out of editkit\")."
               + (f" No GGUF for this model: {no_gguf}." if no_gguf else ""))


if __name__ == "__main__":  # Streamlit's legacy pages/ mode serves this file at a URL too: see ui.script_run
    ui.script_run(__file__)
