"""pyarrow is the optional `parquet` extra: without it, jsonl and sft exports work and a Parquet
export is a clear error naming the extra. pyarrow is installed here, so its absence is simulated
the way Python sees a missing package (sys.modules["pyarrow"] = None)."""

from __future__ import annotations

import sys

import pytest

from rollgate.trainer_adapters.exports import ExportError, export
from tests.trainer_adapters import builders


@pytest.fixture
def no_pyarrow(monkeypatch):
    for name in list(sys.modules):
        if name == "pyarrow" or name.startswith("pyarrow.") or name == "rollgate.trainer_adapters.parquet":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)


def test_without_pyarrow_a_parquet_export_names_the_extra_and_jsonl_still_works(tmp_path, no_pyarrow):
    src = tmp_path / "in.jsonl"
    src.write_text(builders.trajectory(reward=1.0, index=0).model_dump_json() + "\n")
    with pytest.raises(ExportError) as info:
        export(src, tmp_path / "out.parquet", "parquet")
    assert info.value.field == "format" and "pip install 'rollgate[parquet]'" in info.value.message
    assert not (tmp_path / "out.parquet").exists()
    assert export(src, tmp_path / "out.jsonl", "jsonl").written == 1
