"""A pack carries its statistics to another machine (lesson build --keep-statistics): the model's key statistics,
templates and noise scale are copied into the pack as the cache's own files and restored into a cache that lacks
them (never over an entry it has), so the next fact there needs no first-use computation."""
from editkit.core.paths import cache_dir
from editkit.editing.defaults import load_hparams
from editkit.editing.stats import missing, second_moment
from editkit.lesson import carry


def test_statistics_travel_with_the_pack(tiny_by_name, tmp_path, monkeypatch):
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("rome", lm)
    layers = list(range(lm.adapter.n_layers))
    second_moment(lm, layers, hp.mom2_n_tokens)  # this machine's cache holds them
    pack = tmp_path / "pack"
    assert carry.keep(lm.name, pack) > 0
    kept = sorted(p.name for p in (pack / carry.FOLDER).rglob("*.safetensors"))
    assert len(kept) >= len(layers)
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "other-machine"))
    assert missing(lm, layers, hp.mom2_n_tokens) == layers
    copied = carry.restore(lm.name, pack)
    assert missing(lm, layers, hp.mom2_n_tokens) == [] and len(copied) >= len(layers)
    mine = next(cache_dir("stats").rglob("layer0-*.safetensors"))
    mine.write_bytes(mine.read_bytes())  # an entry the cache has is never overwritten
    assert carry.restore(lm.name, pack) == []
