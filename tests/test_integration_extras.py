"""An integration imported without its framework says which extra to install, still as a ModuleNotFoundError."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [("openai_agents", "agents", "openai-agents"), ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
     ("langchain", "langchain_core", "langchain")],
)  # fmt: skip
def test_a_missing_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    name = f"turnstore.integrations.{module}"
    for loaded in [key for key in sys.modules if key == framework or key.startswith(f"{framework}.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, framework, None)  # as if not installed: its import fails
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(name)
    assert f"pip install 'turnstore[{extra}]'" in str(raised.value)
    assert raised.value.name is not None and raised.value.name.split(".")[0] == framework
