"""The viewer in a real browser: Debian's headless Chromium driven by Playwright, against
``turnstore serve``'s app on uvicorn (docs/viewer.md).

Skipped when Chromium or Playwright is missing, except under ``CI=true`` (``.ci/run``
installs Chromium), where that is a failure. Each page's screenshot is saved to
``$TURNSTORE_SCREENSHOTS`` when set (the README's come from ``docs/img``), else to
the test's temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from viewer_data import ANSI, IMG, SCRIPT, build_viewer_store

from turnstore import Store

CHROMIUM = os.environ.get("TURNSTORE_CHROMIUM", "/usr/bin/chromium")
NOT_RUN = "BROWSER TESTS NOT RUN"
"""How a skip of these tests begins: ``conftest.py`` repeats such a reason at the end of the run, in red."""


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set TURNSTORE_CHROMIUM to a Chromium)"
    for module in ("playwright", "uvicorn", "starlette", "jinja2"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the browser tests may not be skipped)")
        pytest.skip(f"{NOT_RUN}, the viewer is untested in a browser: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


SHOTS = "screenshots"
SHOT_SIZE = 80


def _png(size: int) -> bytes:
    """A ``size`` × ``size`` PNG of noise, stored uncompressed: large enough to be kept out of line."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + os.urandom(size * 3) for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 0)) + chunk(b"IEND", b"")


def add_screenshots(store: Store) -> None:
    """A session whose prompt carries a screenshot (kept out of line), and a tool call answered next."""
    import base64

    from turnstore import ImageContent, Message, TextContent, ToolCallContent, UserMessage
    from turnstore.models import AssistantMessage, StopReason

    store.sessions.create(session_id=SHOTS, title="Screenshots")
    loop_id = store.loops.start(SHOTS, loop_id=SHOTS + "-loop").loop_id
    shot = ImageContent(data=base64.b64encode(_png(SHOT_SIZE)).decode(), mime_type="image/png")
    call = ToolCallContent(id="look", name="screenshot", arguments={})
    reply = AssistantMessage(content=[call], stop_reason=StopReason.TOOL_USE, model="m", provider="p", timestamp=2)
    store.messages.append_turn(
        loop_id,
        0,
        [
            UserMessage(content=[TextContent(text="what is on screen?"), shot], timestamp=1),
            reply,
            Message.tool_result(call, [TextContent(text="a window")]),
        ],
    )


@pytest.fixture(scope="module")
def server(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The viewer of a filled store on uvicorn, on a free port of 127.0.0.1, in a thread, set up as
    ``turnstore serve`` sets it up; its base URL."""
    import uvicorn

    from turnstore.cli.serve import LOCAL_HOSTS
    from turnstore.web import create_app

    path = tmp_path_factory.mktemp("browser") / "viewer.db"
    with Store(path) as writer:
        build_viewer_store(writer)
        add_screenshots(writer)
    store = Store(path, read_only=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    running = uvicorn.Server(
        uvicorn.Config(create_app(store, hosts=LOCAL_HOSTS), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        thread.join(timeout=30)
        store.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    """A fresh page that records every dialog (dismissed) and every console error."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    opened.dialogs = []
    opened.errors = []
    opened.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), dialog.dismiss()))
    opened.on("console", lambda message: opened.errors.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("TURNSTORE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def snap(page: Any, folder: Path, name: str, *, full: bool = False) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_sessions_list(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/")

    rows = page.locator("table.sessions tbody tr")
    assert rows.count() == 6
    assert page.locator("table.sessions thead th").all_inner_texts()[:3] == ["Title", "Agent", "Models"]
    assert any("Fix the failing date parser test" in row for row in rows.all_inner_texts())
    page.select_option("select[name=order]", "title")
    page.click("form.filters button")
    titles = page.locator("a.session-link").all_inner_texts()
    assert titles[0].startswith("<b>bold</b>")  # "<" sorts before letters
    assert titles[1:] == [
        "A long loop",
        "Compare two chart libraries",
        "Fix the failing date parser test",
        "Migrate the settings module",
        "Screenshots",
    ]
    page.click("table.sessions thead a:text-is('Cost')")
    shown = page.locator("table.sessions tbody td:nth-child(7)").all_inner_texts()
    costs = [float(cost.strip("$")) for cost in shown[:-1]]
    assert "order=-cost" in page.url and costs == sorted(costs, reverse=True) and len(set(costs)) > 1
    assert shown[-1] == "—"  # no usage: last either way
    page.click("table.sessions thead a:text-is('Cost')")
    shown = page.locator("table.sessions tbody td:nth-child(7)").all_inner_texts()
    assert "order=cost" in page.url and [float(cost.strip("$")) for cost in shown[:-1]] == sorted(costs)
    page.click("table.sessions thead a:text-is('Tokens')")
    assert "order=-tokens" in page.url and page.locator("select[name=order]").input_value() == "-tokens"
    page.goto(server + "/")
    snap(page, shots, "sessions")
    assert page.errors == [] and page.dialogs == []


def test_the_branched_demo_session(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/")
    page.click("text=Fix the failing date parser test")

    assert page.locator("h1").inner_text() == "Fix the failing date parser test"
    loops = page.locator("ul.tree li.loop")
    assert loops.count() == 3
    branch = page.locator("ul.tree li.loop li.loop li.loop")  # the branch, under the follow-up, under the first
    assert "branch after message #" in branch.inner_text()
    assert page.locator("section.turn").count() == 4 + 2  # the first loop's turns, then its follow-up's
    headings = page.locator("section.conversation-part h2").all_inner_texts()
    assert [h.split()[-1][-1] for h in headings] == ["1", "2"]  # .thinking.1, then .thinking.2
    assert "gpt-5" not in page.locator("section.conversation-part").last.inner_text()  # the branch: off the line
    snap(page, shots, "session")
    branch.locator("a").first.click()
    assert page.locator("li.loop.current .relation").inner_text().startswith("branch after message #")
    assert "gpt-5" in page.locator("section.turn").first.inner_text()
    assert page.errors == [] and page.dialogs == []


def test_expand_a_thinking_block(page: Any, server: str) -> None:
    page.goto(server + "/session?id=demo-coding-0b5d0f0e")
    thinking = page.locator("details.thinking").first

    assert thinking.evaluate("node => node.open") is False
    assert not thinking.locator("div.text").is_visible()
    thinking.locator("summary").click()

    assert thinking.evaluate("node => node.open") is True
    assert thinking.locator("div.text").is_visible()
    assert "Run the failing test first" in thinking.locator("div.text").inner_text()


def test_follow_a_tool_call_to_its_result(page: Any, server: str) -> None:
    page.goto(server + "/session?id=demo-coding-0b5d0f0e")
    call = page.locator("div.tool-call").first
    link = call.locator("a.to-result")
    target = link.get_attribute("href")

    link.click()

    assert page.evaluate("location.hash") == target
    result = page.locator(f"article{target}")
    assert result.evaluate("node => node.matches(':target')") is True
    top = result.evaluate("node => node.getBoundingClientRect().top")
    assert -1 <= top < page.viewport_size["height"]  # scrolled to (to within a subpixel)
    assert "FAILED" in result.inner_text() and result.locator(".badge.error").inner_text() == "error"
    result.locator("a.to-call").click()
    assert page.evaluate("location.hash") == "#" + call.get_attribute("id")


def test_spend_page_charts_render(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/spend")

    charts = page.locator("section.chart svg")
    assert charts.count() == 7
    for i in range(charts.count()):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 20
    bars = page.locator("svg rect.bar")
    assert bars.count() > 6
    assert max(bars.nth(i).bounding_box()["width"] for i in range(bars.count())) > 10  # type: ignore[index]
    assert page.locator("svg polyline.line").count() == 1
    days = page.locator("svg.chart-columns").first
    ticks = [days.locator("text.tick").nth(i).text_content() for i in range(days.locator("text.tick").count())]
    assert len(ticks) == days.locator("rect.bar").count() >= 2  # every day labelled (a few days here)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", tick or "") for tick in ticks) and ticks == sorted(ticks)
    assert "?" not in ticks and "1970-01-01" not in page.locator("main").inner_text()
    assert page.locator("#undated").inner_text().startswith("Undated")
    assert (
        page.locator("svg .bar").first.evaluate("node => getComputedStyle(node).fill") != "rgb(0, 0, 0)"
    )  # CSS applied
    snap(page, shots, "spend", full=True)
    assert page.errors == [] and page.dialogs == []


def test_hostile_message_is_shown_as_text_and_runs_nothing(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/")
    page.locator("a.session-link", has_text="bold").click()
    page.wait_for_load_state("load")

    text = page.locator("main").inner_text()
    assert SCRIPT in text and IMG in text
    assert ANSI.replace("\x1b", "\\x1b") in text and "\x1b" not in text
    assert "\\u202eevil" in text
    assert page.evaluate("document.scripts.length") == 0
    assert page.evaluate("[...document.images].map(i => i.getAttribute('src')).filter(s => s === 'x').length") == 0
    page.locator("details.thinking summary").click()
    assert SCRIPT in page.locator("details.thinking").inner_text()
    pixel = page.locator("img.inline").first
    pixel.scroll_into_view_if_needed()
    page.wait_for_function("document.images[0].complete")
    assert pixel.evaluate("node => node.naturalWidth") == 1
    assert "app-only" in text
    snap(page, shots, "hostile")
    page.click("a.context-link")
    assert SCRIPT in page.locator("main").inner_text()
    assert page.dialogs == []


def test_search_and_follow_a_hit_to_its_turn(page: Any, server: str, shots: Path) -> None:
    page.goto(server + "/")
    page.fill("form.search-form input[name=q]", "test")
    page.click("form.search-form button")

    assert page.url.startswith(server + "/search?q=test")
    hits = page.locator("li.hit")
    assert hits.count() > 1
    assert page.locator("li.hit mark").first.inner_text().lower() == "test"
    snap(page, shots, "search")
    page.fill("header form.quick-search input[name=q]", "answer 42")
    page.press("header form.quick-search input[name=q]", "Enter")
    page.wait_for_load_state("load")
    assert page.locator("li.hit").count() == 1
    assert page.locator("li.hit .snippet").inner_text() == "answer 42"
    page.click("a.hit-link")
    page.wait_for_load_state("load")

    assert page.evaluate("location.hash") == "#turn-42"
    turn = page.locator("section#turn-42")
    assert turn.evaluate("node => node.matches(':target')") is True
    assert turn.is_visible() and "answer 42" in turn.inner_text()
    top = turn.evaluate("node => node.getBoundingClientRect().top")
    assert -1 <= top < page.viewport_size["height"]
    assert page.locator("h1").inner_text() == "A long loop"
    assert page.errors == [] and page.dialogs == []


def test_the_context_page_shows_images_by_reference_and_links_calls_to_results(page: Any, server: str) -> None:
    page.goto(server + f"/session?id={SHOTS}")
    page.click("a.context-link")
    page.wait_for_load_state("load")

    image = page.locator("img.inline")
    assert image.count() == 1 and image.get_attribute("src").startswith("/media?sha256=")
    page.wait_for_function("document.images[0].complete")
    assert image.evaluate("node => node.naturalWidth") == SHOT_SIZE
    assert "[image" not in page.locator("main").inner_text()
    assert "no result in this turn" not in page.locator("main").inner_text()
    link = page.locator("div.tool-call a.to-result")
    target = link.get_attribute("href")
    link.click()
    assert page.evaluate("location.hash") == target
    result = page.locator(f"article{target}")
    assert result.evaluate("node => node.matches(':target')") is True and "a window" in result.inner_text()
    assert page.errors == [] and page.dialogs == []
