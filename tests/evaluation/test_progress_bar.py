"""The progress bar of `rollgate eval` and `rollgate eval compare` (rollgate.commands.progress):
it appears once the total is known, counts each finished item, and is closed (its line ended) before
an error leaves the command, so the error is not printed between two redraws of the bar."""

from __future__ import annotations

import pytest

from rollgate.commands.progress import progress


def test_the_bar_counts_to_the_total_and_ignores_items_before_it_is_known(capsys):
    with progress("game", disable=False) as (on_total, advance):
        advance(None)  # before the total: no bar yet, nothing counted
        assert capsys.readouterr().err == ""
        on_total(3)
        for item in range(3):
            advance(item)
    last = capsys.readouterr().err.split("\r")[-1]
    assert "3/3" in last and "game" in last and last.endswith("\n")


def test_the_bar_is_closed_before_an_error_leaves(capsys):
    with pytest.raises(KeyError), progress("sample", disable=False) as (on_total, advance):
        on_total(2)
        advance(0)
        raise KeyError("boom")
    last = capsys.readouterr().err.split("\r")[-1]
    assert "1/2" in last and last.endswith("\n")


def test_a_disabled_bar_writes_nothing(capsys):
    with progress("game", disable=True) as (on_total, advance):
        on_total(2)
        advance(0)
    assert capsys.readouterr().err == ""
