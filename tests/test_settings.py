"""The operator's settings (editkit/core/settings.py), who a visitor is (core/visitor.py) and which models a visitor
may load (model/access.py): safe defaults, clear errors naming the key, the file and the variables in their order,
a proxy's forwarded address read so that a header never makes a visitor more trusted."""
import os

import pytest

from editkit.core.errors import EditkitError
from editkit.core.settings import Settings, parse_budget, parse_settings, settings
from editkit.core.visitor import Visitor, forwarded_addresses, visitor_of
from editkit.model import access

LOCAL, REMOTE = Visitor("127.0.0.1", True), Visitor("203.0.113.7", False)


def test_the_defaults_are_safe_for_a_served_app():
    s = parse_settings("", env={})
    assert s.models == ("shipped",) and s.free_models == "local" and s.trust_remote_code == "nobody"
    assert s.teacher_passphrase == "" and s.memory_budget == "50%" and s.patch_mb == 100 and s.records_mb == 20
    assert s.cite("models.free") == 'setting models.free = "local", the default'
    assert s.limits.cite("jobs") == "setting limits.jobs = 2, the default"
    assert {r["setting"] for r in s.table()} >= {"models.allowed", "limits.samples", "teacher.passphrase"}
    assert "owl" not in repr(parse_settings('[teacher]\npassphrase = "owl"', env={}))


def test_the_file_then_the_variables():
    text = '[models]\nfree = "anyone"\n[limits]\nsamples = 5\njobs = 3\n[memory]\nbudget = "2 GB"\n'
    s = parse_settings(text, "/srv/editkit.toml", env={"EDITKIT_LIMITS": '{"jobs": 4}',
                                                       "EDITKIT_MEMORY_BUDGET": "25%",
                                                       "EDITKIT_TEACHER_PASSPHRASE": "owl"})
    assert (s.free_models, s.limits.samples, s.limits.jobs, s.memory_budget) == ("anyone", 5, 4, "25%")
    assert s.cite("models.free") == 'setting models.free = "anyone", from /srv/editkit.toml'
    assert s.limits.cite("jobs") == "setting limits.jobs = 4, from EDITKIT_LIMITS"
    assert s.limits.cite("samples") == "setting limits.samples = 5, from /srv/editkit.toml"
    assert s.cite("teacher.passphrase") == "setting teacher.passphrase = (set), from EDITKIT_TEACHER_PASSPHRASE"
    assert s.budget_bytes(free=8_000_000_000, reserved=0) == 2_000_000_000


@pytest.mark.parametrize("text,message", [
    ("[models\n", "not valid TOML"), ("[server]\nport = 1\n", "unknown table [server]"),
    ("[models]\nfree = \"everyone\"\n", "models.free must be one of"),
    ("[models]\ntrust_remote_code = \"anyone\"\n", "models.trust_remote_code must be one of"),
    ("[models]\nallowed = \"gpt2\"\n", "models.allowed must be a list"),
    ("[models]\nalowed = []\n", "unknown setting models.alowed"),
    ("[uploads]\npatch_mb = -1\n", "uploads.patch_mb must be a number"),
    ("[uploads]\npatch_mb = true\n", "uploads.patch_mb must be a number"),
    ("[memory]\nbudget = \"lots\"\n", "memory.budget must be a share"),
    ("[memory]\nbudget = \"150%\"\n", "between 0% and 100%"),
    ("[limits]\nsamples = 0\n", "samples must be a positive integer"),
    ("[limits]\nsample = 3\n", "unknown limit"),
])
def test_bad_settings_are_clear_errors(text, message):
    with pytest.raises(EditkitError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_settings(text, "editkit.toml", env={})


def test_budgets():
    assert parse_budget("50%") == (0.5, None) and parse_budget("6 GB") == (0.0, 6e9)
    assert parse_budget("512 MiB") == (0.0, 512 * 2 ** 20)
    assert Settings().budget_bytes(free=6_000, reserved=2_000) == 4_000  # half of what is free for jobs


def test_the_file_is_read_again_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "editkit.toml"
    path.write_text("[limits]\nsamples = 7\n")
    monkeypatch.setenv("EDITKIT_CONFIG", str(path))
    assert settings().limits.samples == 7
    path.write_text("[limits]\nsamples = 8\n")
    os.utime(path, ns=(1, path.stat().st_mtime_ns + 10_000_000))
    assert settings().limits.samples == 8
    monkeypatch.setenv("EDITKIT_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(EditkitError, match="EDITKIT_CONFIG names no settings file"):
        settings()


@pytest.mark.parametrize("peer,headers,local,shown", [
    ("127.0.0.1", {"host": "x"}, True, "127.0.0.1"),
    ("::1", {"host": "x"}, True, "::1"),
    ("192.168.1.20", {"host": "x"}, False, "192.168.1.20"),
    ("203.0.113.7", {"host": "x", "x-forwarded-for": "127.0.0.1"}, False, "203.0.113.7"),  # spoofed: the peer
    ("127.0.0.1", {"host": "x", "x-forwarded-for": "203.0.113.7"}, False, "203.0.113.7"),  # a proxy on ::1
    ("127.0.0.1", {"host": "x", "x-forwarded-for": "127.0.0.1"}, True, "127.0.0.1"),  # a local browser, proxied
    ("127.0.0.1", {"host": "x", "forwarded": 'for="[2001:db8::1]";proto=https'}, False, "2001:db8::1"),
    ("127.0.0.1", {"host": "x", "x-real-ip": "unknown"}, False, "unknown"),
    (None, {"host": "x"}, False, None),  # served but no peer address: not local
    (None, {}, True, None),  # no connection at all (a test, a script)
])
def test_who_is_local(peer, headers, local, shown):
    v = visitor_of(peer, headers)
    assert (v.local, v.address) == (local, shown)


def test_forwarded_addresses():
    assert forwarded_addresses([("X-Forwarded-For", "10.0.0.1, 127.0.0.1:8080")]) == ["10.0.0.1", "127.0.0.1"]


def test_which_models_a_visitor_may_load(tmp_path):
    s = parse_settings("", env={})
    access.check_model("gemma-3-270m", REMOTE, s=s)
    access.check_model("tiny-gpt2", LOCAL, s=s)  # the tiny test models: locally
    access.check_model("gpt2-xl", LOCAL, s=s)  # any hub id: locally
    for name in ("tiny-gpt2", "gpt2-xl", "/etc", "../../x"):
        with pytest.raises(EditkitError, match='models.free = "local", the default'):
            access.check_model(name, REMOTE, s=s)
    with pytest.raises(EditkitError, match="models.trust_remote_code"):
        access.check_model("gpt2-xl", LOCAL, trust_remote_code=True, s=s)
    assert access.pickable(REMOTE, s) == ["gemma-3-270m", "smollm2-135m"]
    assert "tiny-gpt2" in access.pickable(LOCAL, s)
    opened = parse_settings(f'[models]\nfree = "anyone"\nfolders = ["{tmp_path}"]\n', env={})
    (tmp_path / "m").mkdir()
    access.check_model(str(tmp_path / "m"), REMOTE, s=opened)
    access.check_model("owner/model", REMOTE, s=opened)
    with pytest.raises(EditkitError, match="is not inside the folders"):
        access.check_model(str(tmp_path / "m" / ".." / ".."), REMOTE, s=opened)
