"""The first edit on a fresh install: statistics and context templates with progress and time estimates."""
from editkit.editing.defaults import load_hparams
from editkit.editing.run import first_use, run_edit

REQ = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English"}


def test_first_edit_reports_progress_with_time_estimates(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("rome", lm, {"v_num_grad_steps": 2})
    assert first_use(lm, hp) == {"statistics": {"down_proj": {"all": list(hp.layers)}}, "templates": True}
    with_entities = first_use(lm, hp.replace(mom2_entity_weight=0.5))["statistics"]
    assert with_entities == {"down_proj": {"all": list(hp.layers), "entities": list(hp.layers)}}
    seen = []
    run_edit(lm, "rome", [REQ], hp, progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0  # one bar, never going back
    stats = [m for _, m in seen if "statistics" in m]
    assert stats and any(" s left" in m or "min left" in m for m in stats)
    assert any("context templates" in m for _, m in seen)
    assert first_use(lm, hp) == {}
    again = []
    run_edit(lm, "rome", [REQ], hp, progress=lambda f, m: again.append(m))
    assert not any("first use" in m for m in again)  # later edits skip straight to the edit


def test_pmet_ablation_needs_the_w_o_statistics_too(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("pmet", lm, {"update_attn": True})
    need = first_use(lm, hp)["statistics"]
    assert need == {"down_proj": {"all": list(hp.layers)}, "o_proj": {"all": list(hp.layers)}}
    assert "down_proj" not in first_use(lm, load_hparams("rome", lm, {"mom2_adjustment": False}))["statistics"]
