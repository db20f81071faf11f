"""Settings: every source merged by pydantic-settings when a Settings is made, defaults that depend
on another setting derived after the merge, and a clear error for a config file that is no mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollgate.core.settings import Settings


def test_sources_merge_in_order_flags_over_env_over_yaml_over_defaults(tmp_path, monkeypatch):
    cfg = tmp_path / "rollgate.yaml"
    cfg.write_text("model:\n  backend: scripted\n  served_name: from-yaml\nagent:\n  max_turns: 5\nport: 9001\n")
    monkeypatch.setenv("ROLLGATE_AGENT__MAX_TURNS", "7")
    monkeypatch.setenv("ROLLGATE_PORT", "9002")
    s = Settings.load(cfg, port=9003, model={"device": "cpu"})
    # nested sections merge key by key: YAML's backend and name stay beside the flag's device
    assert (s.model.backend, s.model.served_name, s.model.device) == ("scripted", "from-yaml", "cpu")
    assert s.agent.max_turns == 7 and s.port == 9003


def test_a_home_set_in_yaml_moves_the_default_model_path(tmp_path, monkeypatch):
    monkeypatch.delenv("ROLLGATE_HOME", raising=False)
    cfg = tmp_path / "rollgate.yaml"
    cfg.write_text(f"home: {tmp_path / 'elsewhere'}\n")
    s = Settings.load(cfg)
    assert s.model.model_path == str(tmp_path / "elsewhere" / "tiny-model") == s.default_model_path


def test_rollgate_home_is_read_when_settings_are_made_not_at_import(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path / "late"))
    s = Settings.load()
    assert s.home == str(tmp_path / "late") and Path(s.model.model_path).parent == tmp_path / "late"


def test_an_explicit_model_path_is_kept(tmp_path):
    s = Settings.load(home=str(tmp_path), model={"model_path": "/models/mine"})
    assert s.model.model_path == "/models/mine"


@pytest.mark.parametrize(
    "text, message",
    [("- 1\n- 2\n", "must hold a mapping at the top level"), (None, "does not exist")],
)
def test_a_config_file_that_cannot_be_used_is_a_clear_error(tmp_path, text, message):
    cfg = tmp_path / "rollgate.yaml"
    if text is not None:
        cfg.write_text(text)
    with pytest.raises(ValueError, match=message):
        Settings.load(cfg)
