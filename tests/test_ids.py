"""Loop ids (formats.md §1.4 item 5): minting, parsing, numbering, and a loop config's id segment."""

from __future__ import annotations

import pytest

from turnstore.ids import LoopIdParts, mint_loop_id, next_loop_number, parse_loop_id, session_of_loop_id
from turnstore.records import LoopConfig

SESSION = "3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77"


@pytest.mark.parametrize(
    ("loop_id", "parts"),
    [
        (f"{SESSION}.anthropic.claude-sonnet-4-5.thinking.1", (SESSION, "anthropic.claude-sonnet-4-5.thinking", 1)),
        (f"{SESSION}.anthropic.claude-sonnet-4-5.12", (SESSION, "anthropic.claude-sonnet-4-5", 12)),
        (f"{SESSION}.my-config.3", (SESSION, "my-config", 3)),
        (f"{SESSION}.sub.1", (SESSION, "sub", 1)),
        ("s.c.0", ("s", "c", 0)),
    ],
)
def test_parse_loop_id(loop_id: str, parts: tuple[str, str, int]) -> None:
    parsed = parse_loop_id(loop_id)
    assert parsed == LoopIdParts(*parts)
    assert (parsed.session_id, parsed.config_id, parsed.number) == parts
    assert session_of_loop_id(loop_id) == parts[0]


@pytest.mark.parametrize(
    "loop_id",
    [
        SESSION,  # a bare UUID: agent_loop() without BasicAgent
        "",
        "plain",
        f"{SESSION}.config",  # no number
        f"{SESSION}.1",  # no config
        f"{SESSION}.config.",  # empty number
        f"{SESSION}.config.x",
        f"{SESSION}.config.-1",
        f"{SESSION}.config.1.5e3",
        f"{SESSION}..1",  # empty config
        ".config.1",  # empty session
        "..",
        "...",
    ],
)
def test_parse_loop_id_rejects_other_forms(loop_id: str) -> None:
    assert parse_loop_id(loop_id) is None
    assert session_of_loop_id(loop_id) is None


@pytest.mark.parametrize("loop_id", ["s.cfg.²", "s.cfg.1²"])
def test_parse_loop_id_superscript_digit_is_not_a_number(loop_id: str) -> None:
    assert parse_loop_id(loop_id) is None


@pytest.mark.parametrize(
    ("session_id", "config_id", "number", "expected"),
    [
        (SESSION, "anthropic.claude-sonnet-4-5.thinking", 1, f"{SESSION}.anthropic.claude-sonnet-4-5.thinking.1"),
        ("s", "cfg", 42, "s.cfg.42"),
    ],
)
def test_mint_loop_id(session_id: str, config_id: str, number: int, expected: str) -> None:
    minted = mint_loop_id(session_id, config_id, number)
    assert minted == expected
    assert parse_loop_id(minted) == (session_id, config_id, number)


@pytest.mark.parametrize("config_id", [None, ""])
def test_mint_loop_id_without_config_is_still_parseable(config_id: str | None) -> None:
    minted = mint_loop_id(SESSION, config_id, 2)
    parsed = parse_loop_id(minted)
    assert parsed is not None
    assert (parsed.session_id, parsed.number) == (SESSION, 2)
    assert parsed.config_id


@pytest.mark.parametrize(
    ("taken", "expected"),
    [
        ([], 1),
        ([f"{SESSION}.a.b.1"], 2),
        ([f"{SESSION}.cfg.3", f"{SESSION}.cfg.1", f"{SESSION}.cfg.2"], 4),
        ([f"{SESSION}.cfg.9", f"{SESSION}.other.thinking.10"], 11),
        ([SESSION, "not-a-loop-id", f"{SESSION}.cfg.x"], 1),
        ([SESSION, f"{SESSION}.cfg.5"], 6),
    ],
)
def test_next_loop_number(taken: list[str], expected: int) -> None:
    assert next_loop_number(taken) == expected


def test_next_loop_number_accepts_any_iterable() -> None:
    assert next_loop_number(iter(["s.c.7", "s.c.2"])) == 8


# --- LoopConfig.effective_config_id ------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model": "claude-sonnet-4-5", "provider": "anthropic", "config_id": "fast"}, "fast"),
        (
            {"model": "claude-sonnet-4-5", "provider": "anthropic", "config_id": "a.b", "thinking_level": "high"},
            "a.b",
        ),
        ({"model": "claude-sonnet-4-5", "provider": "anthropic"}, "anthropic.claude-sonnet-4-5"),
        ({"model": "gpt-4o", "provider": "openai", "thinking_level": "off"}, "openai.gpt-4o"),
        ({"model": "gpt-4o", "provider": "openai", "thinking_level": None}, "openai.gpt-4o"),
        (
            {"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "high"},
            "anthropic.claude-sonnet-4-5.thinking",
        ),
        ({"model": "o3", "provider": "openai", "thinking_level": "minimal"}, "openai.o3.thinking"),
        ({"model": "claude-sonnet-4.5", "provider": "anthropic"}, "anthropic.claude-sonnet-4-5"),
        ({"model": "meta/llama-3.1:70b", "provider": "ollama"}, "ollama.meta-llama-3-1-70b"),
        ({"model": "models/gemini_2 flash", "provider": "google"}, "google.models-gemini-2-flash"),
    ],
)
def test_effective_config_id(config: dict[str, str | None], expected: str) -> None:
    assert LoopConfig(**config).effective_config_id() == expected


def test_effective_config_id_makes_a_parseable_loop_id() -> None:
    config = LoopConfig(model="claude-sonnet-4.5", provider="anthropic", thinking_level="medium")
    loop_id = mint_loop_id(SESSION, config.effective_config_id(), 1)
    assert loop_id == f"{SESSION}.anthropic.claude-sonnet-4-5.thinking.1"
    assert parse_loop_id(loop_id) == (SESSION, "anthropic.claude-sonnet-4-5.thinking", 1)
