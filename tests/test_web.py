"""``turnstore serve``'s routes through Starlette's test client: every page, 404s, bad parameters,
the token rule, the security headers and the image rule, on SQLite and PostgreSQL (docs/viewer.md)."""

from __future__ import annotations

import base64
import html
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, unquote_plus, urlencode

import pytest
from backends import selected_backends
from cli_runner import run_cli
from factories import assistant, tool_result, user
from markupsafe import escape
from viewer_data import (
    ANSI,
    HOSTILE_TITLE,
    IMG,
    LONG_TURNS,
    PNG_BYTES,
    SCRIPT,
    SVG,
    build_viewer_store,
)

pytest.importorskip("starlette", reason="the serve extra is not installed")
from starlette.testclient import TestClient

from turnstore import ImageContent, InvalidQuery, Message, SearchUnavailable, Store, TextContent, UserMessage
from turnstore.cli.serve import LOCAL_HOSTS
from turnstore.web import create_app
from turnstore.web.security import CONTENT_SECURITY_POLICY
from turnstore.web.text import shown
from turnstore.web.views import snippet_pieces

SYNC = [name for name in selected_backends() if not name.endswith("async")]


@pytest.fixture(params=SYNC or ["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The viewer runs on the sync store: SQLite and PostgreSQL."""
    return str(request.param)


@pytest.fixture
def ids(store: Any) -> dict[str, str]:
    return build_viewer_store(store)


@pytest.fixture
def viewer(store_url: str, ids: dict[str, str]) -> Iterator[TestClient]:
    """A client of the viewer over the filled store, opened read-only as ``turnstore serve`` opens it."""
    with Store(store_url, read_only=True) as read_only:
        yield TestClient(create_app(read_only))


def get(client: TestClient, path: str, status: int = 200, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == status, response.text[:500]
    return response


def follow_pages(client: TestClient, path: str) -> list[str]:
    """Each page from ``path`` on, following its "next" link (as the page gives it) to the last."""
    pages = []
    while path:
        response = client.get(path)  # params= would drop the link's query
        assert response.status_code == 200, path
        pages.append(response.text)
        link = re.search(r'<a rel="next" href="([^"]+)"', response.text)
        path = html.unescape(link.group(1)) if link else ""
    return pages


def text_of(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


# --- sessions -------------------------------------------------------------------------


def test_sessions_list_shows_each_session_with_its_counts_usage_and_models(viewer: TestClient, store: Any) -> None:
    page = get(viewer, "/").text
    shown = text_of(page)

    assert "Fix the failing date parser test" in shown and "Compare two chart libraries" in shown
    coding = store.usage.session("demo-coding-0b5d0f0e")
    row = page[page.index("Fix the failing date parser test") :].split("</tr>")[0]
    cells = [text_of(cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    tokens = coding.input + coding.output + coding.cache_read + coding.cache_write
    summary = next(s for s in store.sessions.list() if s.session_id == "demo-coding-0b5d0f0e")
    assert (summary.loops, summary.messages) == (3, 16)
    assert cells == [
        "demo-coder",
        "claude-sonnet-4-5, gpt-5",
        "3",
        "16",
        f"{tokens:,}",
        f"${coding.cost:,.4f}",
        cells[-1],
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[-1])


def listed(page: str) -> list[str]:
    """The session ids a sessions page links to, in order."""
    return [unquote_plus(html.unescape(found)) for found in re.findall(r'href="/session\?id=([^"]+)"', page)]


def test_sessions_list_pages(viewer: TestClient, store: Any) -> None:
    everything = [s.session_id for s in store.sessions.list()]

    first = get(viewer, "/", per=2).text
    second = get(viewer, "/", per=2, page=2).text
    last = get(viewer, "/", per=2, page=3).text

    assert len(everything) == 5
    assert listed(first) == everything[:2] and listed(second) == everything[2:4] and listed(last) == everything[4:]
    assert 'rel="next"' in first and 'rel="prev"' not in first
    assert 'rel="prev"' in last and 'rel="next"' not in last
    assert "No sessions" in get(viewer, "/", per=2, page=9).text


def test_sessions_list_filters_and_sorts(viewer: TestClient) -> None:
    by_model = text_of(get(viewer, "/", model="gpt-5").text)
    by_title = text_of(get(viewer, "/", order="title").text)
    since = text_of(get(viewer, "/", since="2026-11-03").text)
    until = text_of(get(viewer, "/", until="2026-11-02").text)
    nothing = text_of(get(viewer, "/", agent="nobody").text)

    assert "Compare two chart libraries" in by_model and "Fix the failing" in by_model
    assert "Migrate the settings module" not in by_model and "A long loop" not in by_model
    assert by_title.index("A long loop") < by_title.index("Compare two") < by_title.index("Fix the failing")
    assert "Migrate the settings module" in since and "Fix the failing" not in since
    assert "Fix the failing" in until and "Migrate the settings module" not in until
    assert "No sessions match these filters" in nothing


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"page": "x"}, "page"),
        ({"page": "0"}, "page"),
        ({"per": "1000"}, "per"),
        ({"per": "-1"}, "per"),
        ({"page": "١"}, "page"),  # an Arabic-Indic digit: isdigit() but not ASCII
        ({"order": "cost; drop table"}, "order"),
        ({"since": "2026-13-01"}, "since"),
        ({"until": "yesterday"}, "until"),
        ({"until": "9999-12-31"}, "until"),  # no next day to end at: was a 500 (OverflowError)
    ],
)
def test_bad_list_parameters_are_a_400_naming_them(viewer: TestClient, params: dict[str, str], name: str) -> None:
    response = viewer.get("/", params=params)

    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert re.search(rf'id="error-message">{name}: ', response.text)


# --- a session ------------------------------------------------------------------------


def test_branched_session_shows_its_loop_tree_and_its_conversation(viewer: TestClient, store: Any) -> None:
    loops = store.loops.list("demo-coding-0b5d0f0e")
    branch = next(loop for loop in loops if loop.continuation_kind.value == "branch")

    page = get(viewer, "/session", id="demo-coding-0b5d0f0e").text
    tree = page[page.index('<ul class="tree">') : page.index("</ul>", page.rindex('class="loop'))]

    assert [html.unescape(t) for t in re.findall(r'<li class="loop[^"]*">\s*<a[^>]*>([^<]*)</a>', tree)] == [
        loop.loop_id for loop in loops
    ]
    assert f"branch after message #{branch.fork_after}" in tree
    assert tree.index(loops[1].loop_id) < tree.index(branch.loop_id)  # the branch nested under its parent
    conversation = [loop for loop in loops if loop.continuation_kind.value != "branch"]  # the first, its follow-up
    assert page.count('<section class="turn"') == sum(len(store.messages.turns(loop.loop_id)) for loop in conversation)
    assert '<details class="thinking"><summary>thinking</summary>' in page


def test_each_tool_call_links_to_its_result_and_back(viewer: TestClient) -> None:
    page = get(viewer, "/session", id="demo-coding-0b5d0f0e").text

    calls = re.findall(r'<div class="tool-call" id="(call-[0-9a-f]+)">.*?href="#(result-[0-9a-f]+)"', page, re.S)
    assert len(calls) >= 3
    for call, result in calls:
        assert call[len("call-") :] == result[len("result-") :]
        article = page[page.index(f'id="{result}"') :].split("</article>")[0]
        assert f'href="#{call}"' in article
    failing = page[page.index('class="msg role-toolResult is-error"') :].split("</article>")[0]
    assert '<span class="badge error">error</span>' in failing and "FAILED" in failing


def test_a_call_id_reused_in_another_turn_links_within_its_turn(store: Any, store_url: str) -> None:
    store.sessions.create(session_id="reuse")
    loop = store.loops.start("reuse")
    for k in range(2):
        store.messages.append_turn(
            loop.loop_id, k, [user(f"q{k}"), assistant(calls=("call_0",)), tool_result("call_0", f"result {k}")]
        )
    with Store(store_url, read_only=True) as read_only:
        page = get(TestClient(create_app(read_only)), "/session", id="reuse").text

    ids = re.findall(r' id="((?:call|result)-[0-9a-f]+)"', page)
    assert len(ids) == 4 == len(set(ids))
    for k in range(2):
        turn = page[page.index(f'id="turn-{k}"') :].split("</section>")[0]
        call, result = re.findall(r'href="#(result-[0-9a-f]+)"|id="(result-[0-9a-f]+)"', turn)
        assert call[0] == result[1] and f"result {k}" in turn


def test_turns_carry_their_usage(viewer: TestClient, store: Any) -> None:
    loop_id = store.loops.list("demo-coding-0b5d0f0e")[0].loop_id
    turn = store.usage.turn(loop_id, 1)

    page = get(viewer, "/session", id="demo-coding-0b5d0f0e").text
    heading = text_of(re.search(r"<h3>Turn 1 (.*?)</h3>", page, re.S).group(1))

    tokens = turn.input + turn.output + turn.cache_read + turn.cache_write
    assert f"{tokens:,} tokens" in heading
    assert f"cache hit {turn.cache_hit_rate:.0%}" in heading and f"${turn.cost:,.4f}" in heading


def test_a_loop_is_chosen_and_its_turns_paged(viewer: TestClient, ids: dict[str, str]) -> None:
    first = get(viewer, "/session", id=ids["long"], loop=ids["long_loop"]).text
    last = get(viewer, "/session", id=ids["long"], loop=ids["long_loop"], **{"from": "40"}).text

    assert re.findall(r'id="turn-(\d+)"', first) == [str(k) for k in range(20)]
    assert 'from=20"' in first and 'rel="prev"' not in first
    assert re.findall(r'id="turn-(\d+)"', last) == [str(k) for k in range(40, LONG_TURNS)]
    assert 'rel="next"' not in last and "from=20" in last
    assert "No turns from turn 99" in get(viewer, "/session", id=ids["long"], **{"from": "99"}).text


def conversation(store: Any) -> tuple[str, list[str], str, str]:
    """A session of four prompts, each a loop continuing the last (the second a compaction), with a
    sub-agent and a branch off the conversation: its id, the conversation's loops, the sub-agent's, the branch's."""
    session_id = store.sessions.create(session_id="talk").session_id
    chain = [store.loops.start(session_id).loop_id]
    store.messages.append_turn(chain[0], 0, [user("p0"), assistant("a0", calls=("spawn",)), tool_result("spawn", "r0")])
    child = store.loops.start(session_id, parent_loop_id=None, spawn_loop_id=chain[0], spawn_tool_call_id="spawn")
    store.messages.append_turn(child.loop_id, 0, [user("sub-agent task"), assistant("sub-agent answer")])
    chain.append(store.loops.compact(chain[0], "summary").loop_id)
    store.messages.append_turn(chain[1], 0, [user("p1"), assistant("a1")])
    for k in (2, 3):
        chain.append(store.loops.start(session_id, parent_loop_id=chain[-1]).loop_id)
        for t in range(2):
            store.messages.append_turn(chain[-1], t, [user(f"p{k}.{t}"), assistant(f"a{k}.{t}")])
    fork = store.messages.path(chain[1])[-1].message_id
    branch = store.loops.start(session_id, parent_loop_id=chain[1], continuation_kind="branch", fork_after=fork)
    store.messages.append_turn(branch.loop_id, 0, [user("branch prompt"), assistant("branch answer")])
    return session_id, chain, child.loop_id, branch.loop_id


def test_a_session_page_shows_the_whole_conversation_in_order(store: Any, store_url: str) -> None:
    """A session's page showed its first prompt's loop only, every later prompt behind a link: it shows
    the conversation in order, each loop's turns followed by those of the loop that continues it; a
    sub-agent or a branch stays off it, one link away in the tree."""
    session_id, chain, child, branch = conversation(store)
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        page = get(client, "/session", id=session_id).text
        from_branch = get(client, "/session", id=session_id, loop=branch).text
        from_child = get(client, "/session", id=session_id, loop=child).text
        from_third = get(client, "/session", id=session_id, loop=chain[2]).text

    said = re.findall(r"\b(?:p|a)\d(?:\.\d)?\b|sub-agent task|branch prompt", text_of(page[page.index("<h2>Loop ") :]))
    assert said == ["p0", "a0", "p1", "a1", "p2.0", "a2.0", "p2.1", "a2.1", "p3.0", "a3.0", "p3.1", "a3.1"]
    headings = [html.unescape(h) for h in re.findall(r"<h2>Loop <code>([^<]*)</code></h2>", page)]
    assert headings == chain
    ids = re.findall(r' id="(turn-[^"]+)"', page)
    assert len(ids) == len(set(ids)) and ids[0] == "turn-0"
    assert 'rel="next"' not in page
    assert "branch prompt" in from_branch and "p2.0" not in from_branch  # a branch's own line
    assert "sub-agent answer" in from_child and "p1" not in text_of(from_child)
    assert "p2.0" in from_third and "p1" not in text_of(from_third.split("<h2>Loop ")[1])
    assert "earlier in the conversation" in from_third
    tree = page[page.index('<ul class="tree">') : page.index("<h2>Loop ")]
    assert child in html.unescape(tree) and branch in html.unescape(tree)


def test_the_conversation_is_paged_by_the_message_bound_across_loops(
    store: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnstore.web import app as web_app

    monkeypatch.setattr(web_app, "MESSAGES_PAGE", 3, raising=False)
    session_id, _chain, _child, _branch = conversation(store)
    with Store(store_url, read_only=True) as read_only:
        pages = follow_pages(TestClient(create_app(read_only)), "/session?" + urlencode({"id": session_id}))
    mains = [page[page.index("<h2>Loop ") :] for page in pages]
    counts = [main.count("<article") for main in mains]
    read = [word for main in mains for word in re.findall(r"\b(?:p|a)\d(?:\.\d)?\b|\br0\b", text_of(main))]
    assert read == ["p0", "a0", "r0", "p1", "a1", "p2.0", "a2.0", "p2.1", "a2.1", "p3.0", "a3.0", "p3.1", "a3.1"]
    assert max(counts) <= 3 and len(counts) == 5


def test_subagent_loop_sits_under_the_loop_that_spawned_it(viewer: TestClient, store: Any) -> None:
    parent, child = store.loops.list("demo-research-5c7a2e41")

    page = get(viewer, "/session", id="demo-research-5c7a2e41").text
    inner = page[page.index(parent.loop_id) : page.index("</ul>", page.index(child.loop_id))]

    assert child.loop_id in inner and "sub-agent (tool call" in inner


def test_a_chain_of_hundreds_of_loops_renders_every_loop(store: Any, store_url: str) -> None:
    """A 300-loop continuation chain (what importing 300 question/answer pairs makes) was a 500:
    the tree's recursive macro ran out of stack. Every loop is listed, nesting stops at TREE_INDENT."""
    from turnstore.web.views import TREE_INDENT

    session_id = store.sessions.create(session_id="chain").session_id
    chain = []
    for k in range(300):
        chain.append(store.loops.start(session_id).loop_id)
        store.messages.append(Message.user(f"prompt {k}"), loop_id=chain[-1], turn_index=0)
    rerun = store.loops.start(session_id, parent_loop_id=chain[200], continuation_kind="rerun").loop_id
    with Store(store_url, read_only=True) as read_only:
        page = get(TestClient(create_app(read_only)), "/session", id=session_id, loop=chain[-1]).text

    tree = page[page.index('<ul class="tree">') : page.index("<h2>Loop ")]
    listed = [html.unescape(t) for t in re.findall(r'<li class="loop[^"]*">\s*<a[^>]*>([^<]*)</a>', tree)]
    assert listed == [*chain, rerun]  # tree order: the rerun after the chain under its parent
    assert tree.count("<ul") == tree.count("</ul>") == TREE_INDENT + 1
    assert tree.count("<li") == tree.count("</li>") == 301
    assert 'class="loop current"' in tree and "depth 299</span>" in tree
    assert f"depth 201, under {chain[200]}</span>" in html.unescape(tree)  # its parent is not the loop above it
    assert "prompt 299" in page


@pytest.mark.parametrize(
    ("params", "status", "said"),
    [
        ({}, 400, "id: is required"),
        ({"id": "nope"}, 404, "nope"),
        ({"id": "demo-coding-0b5d0f0e", "loop": "nope"}, 404, "nope"),
        ({"id": "demo-coding-0b5d0f0e", "loop": "demo-research-5c7a2e41.openai.gpt-5.1"}, 404, "not found in session"),
        ({"id": "demo-coding-0b5d0f0e", "from": "-1"}, 400, "from: "),
        ({"id": "demo-coding-0b5d0f0e", "from": "1e3"}, 400, "from: "),
        ({"id": "demo-coding-0b5d0f0e", "offset": "-1"}, 400, "offset: "),
        ({"id": "demo-coding-0b5d0f0e", "offset": "99"}, 400, "offset: must be less than"),
    ],
)
def test_session_page_errors(viewer: TestClient, params: dict[str, str], status: int, said: str) -> None:
    response = viewer.get("/session", params=params)

    assert response.status_code == status
    assert said in html.unescape(response.text)


# --- context, images, spend ---------------------------------------------------------------


def test_context_page_shows_what_context_returns(viewer: TestClient, store: Any, ids: dict[str, str]) -> None:
    branch = store.loops.list("demo-coding-0b5d0f0e")[2].loop_id
    context = store.messages.context(branch)

    page = get(viewer, "/context", loop=branch).text
    hostile = get(viewer, "/context", loop=ids["hostile_loop"]).text

    assert f"built from {len(store.messages.path(branch))} stored messages" in page
    assert re.findall(r'class="msg role-(\w+)', page) == [m.role for m in context]
    assert "role-extension" not in hostile and "app-only" not in hostile
    assert get(viewer, "/context", 404, loop="nope").status_code == 404
    assert get(viewer, "/context", 400).status_code == 400
    assert get(viewer, "/context", 400, loop=branch, offset="x").status_code == 400


def test_context_page_is_paged(viewer: TestClient, ids: dict[str, str]) -> None:
    first = get(viewer, "/context", loop=ids["long_loop"]).text
    rest = get(viewer, "/context", loop=ids["long_loop"], offset=60).text

    assert "stored messages 1–90 of 90" in first and "stored messages 61–90 of 90" in rest
    assert first.count('<article class="msg') == 2 * LONG_TURNS
    assert rest.count('<article class="msg') == 2 * LONG_TURNS - 60
    assert 'rel="next"' not in first and 'rel="prev"' not in first and "offset=0" in rest


def screenshots(store: Any, session_id: str, count: int, size: int = 300_000) -> str:
    """A loop of ``count`` turns, each a prompt with a screenshot of ``size`` bytes (kept out of line,
    every one different) and a tool call answered in the next message; its id."""
    import os

    store.sessions.create(session_id=session_id)
    loop_id = store.loops.start(session_id).loop_id
    for k in range(count):
        shot = ImageContent(data=base64.b64encode(PNG_BYTES + os.urandom(size)).decode(), mime_type="image/png")
        prompt = UserMessage(content=[TextContent(text=f"look {k}"), shot], timestamp=1_000)
        store.messages.append_turn(
            loop_id, k, [prompt, assistant(calls=(f"c{k}",)), tool_result(f"c{k}", f"seen {k}"), assistant(f"done {k}")]
        )
    return loop_id


def test_the_context_page_holds_no_image_bytes_and_serves_them_by_digest(store: Any, store_url: str) -> None:
    """The context page read the whole loop with its images inline (a store of screenshots made one
    request cost gigabytes): it reads a page with each image a reference, and ``<img>`` loads it from
    ``/media`` by its SHA-256, as an image for an image type, else as a download."""
    loop_id = screenshots(store, "shots", 3, 30_000)
    whole = store.messages.context(loop_id)
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        page = get(client, "/context", loop=loop_id).text
        sources = [html.unescape(src) for src in re.findall(r'<img class="inline" loading="lazy" src="([^"]+)"', page)]
        served = [client.get(src) for src in sources]
        digest = sources[0].split("sha256=")[1].split("&")[0]
        as_svg = get(client, "/media", sha256=digest, type="image/svg+xml")
        untyped = get(client, "/media", sha256=digest)
        bad = [get(client, "/media", 400, sha256=value) for value in ("", "x" * 64, digest.upper(), digest[:-1])]
        unknown = get(client, "/media", 404, sha256="0" * 64)

    assert len(sources) == 3 and all(src.startswith("/media?sha256=") and "type=image%2Fpng" in src for src in sources)
    assert len(page) < 30_000 and "base64" not in page
    for response, message in zip(served, [m for m in whole if m.role == "user"]):
        assert response.status_code == 200 and response.headers["content-type"] == "image/png"
        assert response.content == base64.b64decode(message.content[1].data)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "default-src 'self'" in response.headers["content-security-policy"]
    for download in (as_svg, untyped):
        assert download.headers["content-type"] == "application/octet-stream"
        assert download.headers["content-disposition"].startswith("attachment")
    assert all("sha256" in text_of(response.text) for response in bad)
    assert "not found" in text_of(unknown.text)


def test_a_small_image_of_the_context_page_is_served_by_its_message(viewer: TestClient, ids: dict[str, str]) -> None:
    """An image small enough to be stored inline has no digest: the context page links it by its message."""
    page = get(viewer, "/context", loop=ids["hostile_loop"]).text
    sources = [html.unescape(src) for src in re.findall(r'<img class="inline" loading="lazy" src="([^"]+)"', page)]
    png = viewer.get(sources[0])

    assert len(sources) == 2 and all(src.startswith("/image?id=") for src in sources)
    assert png.headers["content-type"] == "image/png" and png.content == PNG_BYTES
    assert "[image image/png]" not in page and "image/svg+xml</a> (not shown" in page
    assert get(viewer, "/image", 404, id=10**9, block=0).status_code == 404
    assert get(viewer, "/image", 400, id="x", block=0).status_code == 400


def test_one_context_request_stays_small_on_a_store_of_screenshots(store: Any, store_url: str) -> None:
    """Peak memory of one ``/context`` request: it held every image of the loop (here 24 of 300 KB,
    7 MB of data, read as text and models several times over); now a page of references."""
    import tracemalloc

    loop_id = screenshots(store, "many-shots", 24)
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        get(client, "/context", loop=loop_id)  # templates and statements warm
        tracemalloc.start()
        try:
            page = get(client, "/context", loop=loop_id).text
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert page.count("<img ") == 24
    assert peak < 3_000_000, f"peak {peak:,} bytes"


def test_the_context_page_links_each_call_to_its_result_across_turns(viewer: TestClient, store: Any) -> None:
    """The context page said "no result in this turn" for every call, the result the next message: each
    call links to its result and back (a call never answered links to the synthetic result)."""
    loop_id = store.loops.list("demo-coding-0b5d0f0e")[2].loop_id
    page = get(viewer, "/context", loop=loop_id).text

    calls = re.findall(r'<div class="tool-call" id="(call-[0-9a-f]+)">.*?href="#(result-[0-9a-f]+)"', page, re.S)
    assert len(calls) == page.count('<div class="tool-call"') >= 3
    assert "no result in this turn" not in page and "result not on this page" not in page
    anchors = re.findall(r' id="((?:call|result)-[0-9a-f]+)"', page)
    assert len(anchors) == len(set(anchors))
    for call, result in calls:
        article = page[page.index(f'id="{result}"') :].split("</article>")[0]
        assert f'href="#{call}"' in article


def test_a_context_page_never_parts_a_call_from_its_results(
    store: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnstore.web import app as web_app

    monkeypatch.setattr(web_app, "CONTEXT_PAGE", 2, raising=False)
    loop_id = screenshots(store, "pages", 3, 10)
    with Store(store_url, read_only=True) as read_only:
        pages = follow_pages(TestClient(create_app(read_only)), "/context?" + urlencode({"loop": loop_id}))
    for page in pages:
        assert page.count('<div class="tool-call"') == page.count('href="#result-') == page.count('class="to-call"')
    read = [word for page in pages for word in re.findall(r"(?:look|seen|done) \d", text_of(page))]
    assert len(pages) > 1
    assert read == [f"{word} {k}" for k in range(3) for word in ("look", "seen", "done")]


def test_images_are_served_only_as_the_image_types_they_claim(viewer: TestClient, ids: dict[str, str]) -> None:
    place = {"loop": ids["hostile_loop"], "turn": 0, "message": 0}

    png = get(viewer, "/image", **place, block=1)
    svg = get(viewer, "/image", **place, block=2)
    page = get(viewer, "/session", id=ids["hostile"]).text

    assert png.headers["content-type"] == "image/png" and png.content == PNG_BYTES
    assert svg.headers["content-type"] == "application/octet-stream"
    assert svg.headers["content-disposition"].startswith("attachment")
    assert svg.headers["x-content-type-options"] == "nosniff"
    assert svg.content.startswith(b"<svg") and SVG
    assert page.count("<img ") == 2  # the PNG, and the undecodable "PNG" (which then fails to load)
    assert 'loading="lazy"' in page
    assert "image/svg+xml</a> (not shown" in page


@pytest.mark.parametrize(
    ("place", "status"),
    [
        ({"turn": 0, "message": 0, "block": 0}, 404),  # a text block
        ({"turn": 0, "message": 0, "block": 9}, 404),
        ({"turn": 0, "message": 9, "block": 1}, 404),
        ({"turn": 7, "message": 0, "block": 1}, 404),
        ({"turn": 0, "message": 0, "block": 3}, 400),  # stored data that is not base64
        ({"turn": 0, "message": 0}, 400),
        ({"turn": "x", "message": 0, "block": 1}, 400),
    ],
)
def test_image_errors(viewer: TestClient, ids: dict[str, str], place: dict[str, Any], status: int) -> None:
    assert get(viewer, "/image", status, loop=ids["hostile_loop"], **place).status_code == status


def test_unknown_loop_image_is_404(viewer: TestClient) -> None:
    assert get(viewer, "/image", 404, loop="nope", turn=0, message=0, block=0).status_code == 404


def test_spend_page_draws_its_charts_as_svg(viewer: TestClient, store: Any) -> None:
    page = get(viewer, "/spend").text
    days = [row for row in store.usage.by_day() if row.day and row.day != "1970-01-01"]  # consecutive days here
    models = store.usage.by_model()

    charts = re.findall(r'<svg class="chart-(\w+)".*?</svg>', page, re.S)
    assert charts == ["columns", "columns", "line", "rows", "rows", "rows", "rows"]
    svgs = re.findall(r'<svg class="chart-\w+".*?</svg>', page, re.S)
    assert svgs[0].count('<rect class="bar"') == len(days)
    assert svgs[3].count('<rect class="bar"') == len(models)
    assert (
        svgs[5].count('<rect class="bar"') == svgs[6].count('<rect class="bar"') == len(store.usage.by_session()) == 5
    )
    assert "Fix the failing date parser test" in svgs[5]
    assert svgs[2].count("<circle") == len(days) and "<polyline" in svgs[2]
    assert f"${store.usage.total().cost:,.2f}" in page or f"${store.usage.total().cost:,.4f}" in page


def test_spend_page_of_an_empty_store(store_url: str, store: Any) -> None:
    with Store(store_url, read_only=True) as read_only:
        page = get(TestClient(create_app(read_only)), "/spend").text

    assert page.count("No usage recorded.") == 7 and "<svg" not in page


# --- search ---------------------------------------------------------------------------


def hit_links(page: str) -> list[str]:
    """The hrefs of a results page's hits, in order."""
    return [html.unescape(found) for found in re.findall(r'<a class="hit-link" href="([^"]+)"', page)]


def expected_link(hit: Any) -> str:
    query = urlencode({"id": hit.session_id, "loop": hit.loop_id, "from": hit.turn_index})
    return f"/session?{query}#turn-{hit.turn_index}"


def test_the_search_box_is_on_the_sessions_page_and_in_every_header(viewer: TestClient) -> None:
    sessions = get(viewer, "/").text
    spend = get(viewer, "/spend").text

    assert sessions.count('action="/search"') == 2  # the header's box and the sessions page's form
    assert re.search(r'<form class="search-form" method="get" action="/search".*?name="q"', sessions, re.S)
    assert re.search(r'<form class="quick-search" method="get" action="/search".*?name="q"', spend, re.S)


@pytest.mark.parametrize("q", ["", "   "])
def test_search_without_a_query_is_the_form_only(viewer: TestClient, q: str) -> None:
    page = get(viewer, "/search", q=q).text

    assert '<form class="search-form"' in page
    assert "hit-link" not in page and "error-message" not in page and "No messages match" not in page


def test_search_lists_hits_best_first_linking_to_their_turns(viewer: TestClient, store: Any) -> None:
    hits = store.messages.search("prompt", limit=20)
    page = get(viewer, "/search", q="prompt").text

    assert len(hits) == 20
    assert hit_links(page) == [expected_link(hit) for hit in hits]
    first = page[page.index('<li class="hit') :].split("</li>")[0]
    assert "A long loop" in first and f"turn {hits[0].turn_index}" in first
    assert '<span class="role">user</span>' in first
    assert f'<div class="snippet"><mark>prompt</mark> {hits[0].turn_index}</div>' in first


def test_each_hit_link_opens_a_page_holding_its_turn(viewer: TestClient, store: Any) -> None:
    page = get(viewer, "/search", q="alert").text
    links = hit_links(page)

    assert len(links) == len(store.messages.search("alert")) >= 3
    for link in links:
        path, anchor = link.split("#")
        target = viewer.get(path)
        assert target.status_code == 200
        turn = target.text[target.text.index(f'<section class="turn" id="{anchor}">') :].split("</section>")[0]
        assert "alert" in turn


def test_search_results_are_paged(viewer: TestClient, store: Any) -> None:
    everything = store.messages.search("prompt", limit=100)
    pages = [get(viewer, "/search", q="prompt", page=n).text for n in (1, 2, 3, 4)]

    assert len(everything) == 45
    assert [len(hit_links(p)) for p in pages] == [20, 20, 5, 0]
    assert [link for p in pages for link in hit_links(p)] == [expected_link(hit) for hit in everything]
    assert 'rel="next"' in pages[0] and 'rel="prev"' not in pages[0]
    assert 'rel="prev"' in pages[2] and 'rel="next"' not in pages[2]
    assert '<ol class="hits" start="21">' in pages[1]
    assert "No messages match on page 4" in pages[3]
    nxt = html.unescape(re.search(r'<a rel="next" href="([^"]+)"', pages[0]).group(1))  # type: ignore[union-attr]
    assert hit_links(viewer.get(nxt).text) == hit_links(pages[1])


def test_search_filters_by_session_and_role(viewer: TestClient, store: Any, ids: dict[str, str]) -> None:
    by_role = get(viewer, "/search", q="alert", role="toolResult").text
    in_session = get(viewer, "/search", q="prompt", session=ids["hostile"]).text
    in_long = get(viewer, "/search", q="prompt", session=ids["long"], role="user").text

    assert re.findall(r'<li class="hit role-(\w+)">', by_role) == ["toolResult"]
    assert '<option value="toolResult" selected>' in by_role
    assert "No messages match." in in_session and "hit-link" not in in_session
    # shown as the rule for hostile text has it: the id's U+202E as a visible escape
    assert f'name="session" value="{html.escape(shown(ids["hostile"]))}"' in in_session
    assert len(hit_links(in_long)) == 20
    assert all(link.startswith("/session?id=long-session&") for link in hit_links(in_long))


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"q": '"unbalanced'}, "query: unbalanced quote"),
        ({"q": "-only"}, "query: "),
        ({"q": "x" * 1001}, "query: "),
        ({"q": "prompt", "role": "nobody"}, "role: must be one of"),
        ({"q": "prompt", "page": "0"}, "page: must be a whole number"),
    ],
)
def test_a_bad_search_is_a_400_saying_why(viewer: TestClient, params: dict[str, str], said: str) -> None:
    response = viewer.get("/search", params=params)

    assert response.status_code == 400
    message = html.unescape(re.search(r'id="error-message">([^<]*)<', response.text).group(1))  # type: ignore[union-attr]
    assert message.startswith(said) and "\n" not in message
    assert '<form class="search-form"' in response.text and "hit-link" not in response.text


def test_a_bad_query_shows_the_message_invalid_query_carries(viewer: TestClient, store: Any) -> None:
    with pytest.raises(InvalidQuery) as raised:
        store.messages.search('"unbalanced')

    page = get(viewer, "/search", 400, q='"unbalanced').text

    assert str(escape(str(raised.value))) in page


def test_search_unavailable_is_a_page_saying_so(store_url: str, ids: dict[str, str]) -> None:
    with Store(store_url, read_only=True) as read_only:

        def unavailable(*_args: Any, **_kwargs: Any) -> None:
            raise SearchUnavailable("full-text search needs SQLite's FTS5")

        read_only.messages.search = unavailable  # type: ignore[method-assign]
        response = TestClient(create_app(read_only)).get("/search", params={"q": "prompt"})

    assert response.status_code == 503
    assert "Search is not available in this store: full-text search needs SQLite&#39;s FTS5" in response.text


def test_hostile_text_in_search_results_stays_text(viewer: TestClient) -> None:
    page = get(viewer, "/search", q="alert").text
    results = page[page.index('<ol class="hits"') :]

    assert "<script>" not in page and "<img src=x" not in page and "<b>bold" not in page
    assert "\x1b" not in page and "\u202e" not in page
    assert (
        "&lt;script&gt;<mark>alert</mark>(1)&lt;/script&gt; &lt;img src=x onerror=<mark>alert</mark>(2)&gt;" in results
    )
    assert "\\x1b[31mred <mark>alert</mark>\\x1b[0m \\u202eevil" in results
    assert set(re.findall(r"<mark>([^<]*)</mark>", results)) == {"alert"}
    assert str(escape(HOSTILE_TITLE.replace("\x1b", "\\x1b"))) in results
    assert "note&lt;script&gt;" in results


def test_snippet_pieces_follow_the_highlights_and_skip_bad_ranges() -> None:
    assert snippet_pieces("deploy failed again", [(7, 13), (0, 6)]) == [
        ("deploy", True),
        (" ", False),
        ("failed", True),
        (" again", False),
    ]
    assert snippet_pieces("abc", [(1, 2), (1, 3), (2, 2), (5, 9), (-4, -1)]) == [("a", False), ("b", True), ("c", True)]
    assert snippet_pieces("", []) == []


# --- hostile text, headers, the token -------------------------------------------------------


def test_hostile_text_is_shown_as_text(viewer: TestClient, ids: dict[str, str]) -> None:
    pages = [
        get(viewer, "/").text,
        get(viewer, "/session", id=ids["hostile"]).text,
        get(viewer, "/context", loop=ids["hostile_loop"]).text,
    ]

    for page in pages:
        assert "<script>" not in page and "<img src=x" not in page and "<b>bold" not in page
        assert "\x1b" not in page and "\u202e" not in page and "\x07" not in page
    session = pages[1]
    assert html.escape(SCRIPT, quote=True) in session
    assert html.escape(IMG, quote=True) in session
    assert "\\x1b[31mred alert\\x1b[0m" in session and "\\u202eevil" in session
    assert str(escape(HOSTILE_TITLE.replace("\x1b", "\\x1b"))) in pages[0]
    assert "app-only" in session and "note&lt;script&gt;" in session
    assert ANSI not in session


def test_security_headers_on_every_response(viewer: TestClient) -> None:
    responses = [
        viewer.get("/"),
        viewer.get("/nope"),
        viewer.get("/session"),
        viewer.get("/static/style.css"),
        viewer.get("/spend"),
    ]

    assert [r.status_code for r in responses] == [200, 404, 400, 200, 200]
    for response in responses:
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "no page at /nope" in responses[1].text


def test_templates_are_compiled_when_the_app_is_made_not_by_requests(
    store_url: str, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jinja2 import Environment

    compiled: list[str | None] = []
    original = Environment.compile

    def counting(self: Environment, source: Any, name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        compiled.append(name)
        return original(self, source, name, *args, **kwargs)

    monkeypatch.setattr(Environment, "compile", counting)
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        at_start = sorted(compiled)
        compiled.clear()
        for path, params in [("/", {}), ("/search", {"q": "prompt"}), ("/session", {"id": ids["long"]}), ("/nope", {})]:
            client.get(path, params=params)

    assert "sessions.html" in at_start and "search.html" in at_start and "_message.html" in at_start
    assert compiled == []


def test_templates_never_mark_content_safe() -> None:
    templates = Path(__import__("turnstore.web", fromlist=["x"]).__file__).parent / "templates"

    for template in templates.glob("*.html"):
        assert "|safe" not in template.read_text().replace(" ", ""), template.name
        assert "autoescape false" not in template.read_text(), template.name


def test_token_is_required_when_set(store: Any, store_url: str, ids: dict[str, str]) -> None:
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only, token="s3cret-token"))

        missing = client.get("/")
        wrong = client.get("/", params={"token": "s3cret-tokem"})
        wrong_header = client.get("/", headers={"X-Turnstore-Token": "nope"})
        static = client.get("/static/style.css")
        header = client.get("/spend", headers={"X-Turnstore-Token": "s3cret-token"})
        query = client.get("/", params={"token": "s3cret-token"})
        cookie_only = client.get("/session", params={"id": ids["coding"]})
        client.cookies.clear()
        after = client.get("/")
        bad_cookie = client.get("/", headers={"Cookie": 'turnstore_token="\\x"; ;;='})

    assert [r.status_code for r in (missing, wrong, wrong_header, static, after, bad_cookie)] == [401] * 6
    assert missing.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "s3cret" not in missing.text
    assert header.status_code == 200 and "set-cookie" not in header.headers
    assert query.status_code == 200
    assert query.headers["set-cookie"] == "turnstore_token=s3cret-token; Path=/; HttpOnly; SameSite=Strict"
    assert cookie_only.status_code == 200


def test_the_token_cookie_is_found_beside_a_malformed_cookie_of_another_app(store: Any, store_url: str) -> None:
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only, token="s3cret-token"))
        beside = client.get("/", headers={"Cookie": 'a="; turnstore_token=s3cret-token'})
        wrong = client.get("/", headers={"Cookie": 'a="; turnstore_token=s3cret-tokem'})

    assert (beside.status_code, wrong.status_code) == (200, 401)


@pytest.mark.parametrize(
    ("site", "status"), [("cross-site", 403), ("same-site", 403), ("same-origin", 200), ("none", 200)]
)
def test_requests_other_sites_make_through_the_browser_are_refused(viewer: TestClient, site: str, status: int) -> None:
    response = viewer.get("/search", params={"q": "prompt"}, headers={"Sec-Fetch-Site": site})

    assert response.status_code == status
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    if status == 403:
        assert "<mark>" not in response.text


def test_a_huge_text_is_cut_with_a_note(store: Any, store_url: str) -> None:
    from turnstore.web.text import SHOWN_LIMIT

    session_id = store.sessions.create(title="huge").session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append(Message.user("x" * (SHOWN_LIMIT + 5_000) + "TAIL"), loop_id=loop_id, turn_index=0)
    with Store(store_url, read_only=True) as read_only:
        page = get(TestClient(create_app(read_only)), "/session", id=session_id).text

    assert "TAIL" not in page and "x" * SHOWN_LIMIT in page
    assert "5,004 more characters not shown" in page
    assert len(page) < SHOWN_LIMIT + 50_000


def test_a_huge_turn_is_shown_a_bounded_page_at_a_time(
    store: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One turn of 200,000 messages was one 80 MB page: a page now reads at most MESSAGES_PAGE messages,
    says how many of the turn it left out and links to the rest, so following the links shows every one."""
    from turnstore.web import app as web_app

    monkeypatch.setattr(web_app, "MESSAGES_PAGE", 7, raising=False)
    session_id = store.sessions.create(session_id="huge-turn").session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [user(f"m0.{i}") for i in range(20)])
    store.messages.append_turn(loop_id, 1, [user(f"m1.{i}") for i in range(3)])
    read = []
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        first = get(client, "/session", id=session_id).text
        path, pages = "/session?" + urlencode({"id": session_id}), []
        while path:
            response = client.get(path)  # the link as the page gives it (params= would drop its query)
            assert response.status_code == 200, path
            pages.append(response.text)
            read += re.findall(r"m\d\.\d+", text_of(pages[-1]))
            link = re.search(r'<a rel="next" href="([^"]+)"', pages[-1])
            path = html.unescape(link.group(1)) if link else ""

    assert first.count("<article") == 7
    notice = text_of(first[first.index('id="cut-notice"') :].split("</p>")[0])
    assert "13 more messages of turn 0 not shown here" in notice and "Continue at message 8" in notice
    assert "messages 1–7 of this turn's 20" in text_of(first)
    assert read == [f"m0.{i}" for i in range(20)] + [f"m1.{i}" for i in range(3)]  # every one, once, in order
    assert [page.count("<article") for page in pages] == [7, 7, 7, 2]
    assert "messages 8–14 of this turn's 20" in text_of(pages[1]) and "earlier messages of this turn" in pages[1]
    assert "2 more messages of turn 1 not shown here" in text_of(pages[2])
    assert "cut-notice" not in pages[3]


def test_a_tool_call_whose_result_is_on_the_next_page_says_so(
    store: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page cut between a call and its result: the call says its result is not on this page, not that
    the turn holds none (a call of a whole turn without its result still says that)."""
    from turnstore.web import app as web_app

    monkeypatch.setattr(web_app, "MESSAGES_PAGE", 2, raising=False)
    session_id = store.sessions.create(session_id="split").session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [user("go"), assistant(calls=("c1",)), tool_result("c1", "done")])
    store.messages.append_turn(loop_id, 1, [assistant(calls=("c2",))])  # no result at all
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        first = get(client, "/session", id=session_id).text
        last = get(client, "/session", id=session_id, **{"from": 1}).text
    assert "result not on this page" in first and "no result in this turn" not in first
    assert "no result in this turn" in last and "result not on this page" not in last


def test_the_next_link_reaches_every_turn_past_a_full_page_and_gaps_in_turn_numbers(
    store: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page whose message bound ends exactly at a turn's end, and turn numbers with gaps wider than a
    page of turns: following "later turns" still shows every turn, once, in order."""
    from turnstore.web import app as web_app

    monkeypatch.setattr(web_app, "MESSAGES_PAGE", 4, raising=False)
    session_id = store.sessions.create(session_id="gaps").session_id
    loop_id = store.loops.start(session_id).loop_id
    for turn_index, count in [(0, 4), (1, 1), (2, 2), (60, 1), (200, 2)]:
        store.messages.append_turn(loop_id, turn_index, [user(f"m{turn_index}.{i}") for i in range(count)])
    read = []
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        path = "/session?" + urlencode({"id": session_id})
        while path:
            response = client.get(path)
            assert response.status_code == 200, path
            read += re.findall(r"m\d+\.\d+", text_of(response.text))
            link = re.search(r'<a rel="next" href="([^"]+)"', response.text)
            path = html.unescape(link.group(1)) if link else ""
    assert read == ["m0.0", "m0.1", "m0.2", "m0.3", "m1.0", "m2.0", "m2.1", "m60.0", "m200.0", "m200.1"]


def test_query_values_echoed_into_form_fields_are_made_visible(viewer: TestClient) -> None:
    """A query parameter shown back in a form field follows the rule of stored text: control and bidi
    characters as visible escapes, as the page's title shows them, never raw."""
    hostile = "\x1b[31m\u202eevil"
    for path, params in [
        ("/search", {"q": hostile}),
        ("/search", {"q": "x", "session": hostile}),
        ("/", {"agent": hostile}),
        ("/", {"model": hostile}),
    ]:
        page = get(viewer, path, **params).text
        assert "\x1b" not in page and "\u202e" not in page, path
        assert 'value="\\x1b[31m\\u202eevil"' in page, path


def test_no_token_no_check(viewer: TestClient) -> None:
    assert viewer.get("/", headers={"X-Turnstore-Token": "anything"}).status_code == 200


def test_the_viewer_never_writes(store_url: str, ids: dict[str, str], store: Any) -> None:
    before = [(s.session_id, s.updated_at) for s in store.sessions.list()]
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        for path, params in [("/", {}), ("/session", {"id": ids["coding"]}), ("/spend", {})]:
            get(client, path, **params)

    assert [(s.session_id, s.updated_at) for s in store.sessions.list()] == before


# --- the command -----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "::", "example.org"])
def test_serve_refuses_a_remote_host_without_allow_remote(tmp_path: Path, host: str) -> None:
    result = run_cli("--db", tmp_path / "s.db", "serve", "--host", host)

    assert result.code == 2
    assert f"refusing to serve on {host}" in result.err and "--allow-remote" in result.err


def test_serve_refuses_a_bad_port(tmp_path: Path) -> None:
    result = run_cli("--db", tmp_path / "s.db", "serve", "--port", "0")

    assert result.code == 2 and "--port" in result.err


def test_serve_without_the_extra_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if turnstore[serve] were not installed

    result = run_cli("--db", tmp_path / "s.db", "serve")

    assert result.code == 1
    assert (
        result.err == "error: turnstore serve needs the serve extra (missing uvicorn): pip install 'turnstore[serve]'\n"
    )


def test_serve_a_missing_store_is_one_line(tmp_path: Path) -> None:
    result = run_cli("--db", tmp_path / "missing" / "s.db", "serve")

    assert result.code == 1 and result.err.startswith("error: ") and result.err.count("\n") == 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(db: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "turnstore", "--db", str(db), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, port
        except OSError:
            if process.poll() is not None:
                raise AssertionError(process.stderr.read() if process.stderr else "serve exited") from None
            time.sleep(0.1)
    process.kill()
    raise AssertionError("turnstore serve did not listen in 30 s")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_serve_runs_the_viewer_on_localhost(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    assert run_cli("--db", db, "demo").code == 0
    process, port = _serve(db)
    try:
        assert _status(f"http://127.0.0.1:{port}/") == 200
        assert _status(f"http://127.0.0.1:{port}/session?id=demo-coding-0b5d0f0e") == 200
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    assert f"turnstore viewer (read-only) at http://127.0.0.1:{port}/" in out


def test_serve_with_allow_remote_prints_a_token_and_requires_it(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    assert run_cli("--db", db, "demo").code == 0
    process, port = _serve(db, "--host", "127.0.0.1", "--allow-remote")
    try:
        assert process.stdout is not None
        printed = process.stdout.readline() + process.stdout.readline()
        token = re.search(r"\?token=([A-Za-z0-9_-]{40,})", printed)
        assert token is not None and f"access token: {token.group(1)}" in printed
        refused = _status(f"http://127.0.0.1:{port}/")
        wrong = _status(f"http://127.0.0.1:{port}/?token=x{token.group(1)}")
        allowed = _status(f"http://127.0.0.1:{port}/?token={token.group(1)}")
    finally:
        process.terminate()
        process.communicate(timeout=30)

    assert (refused, wrong, allowed) == (401, 401, 200)


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:8484", 200),
        ("localhost:8484", 200),
        ("LOCALHOST", 200),
        ("[::1]:8484", 200),
        ("evil.example:8484", 400),
        ("127.0.0.1.evil.example", 400),
        ("[::2]:8484", 400),
        ("", 400),
    ],
)
def test_a_local_viewer_answers_only_to_local_host_names(
    store_url: str, ids: dict[str, str], host: str, status: int
) -> None:
    with Store(store_url, read_only=True) as read_only:
        client = TestClient(create_app(read_only, hosts=LOCAL_HOSTS))
        response = client.get("/", headers={"Host": host})

    assert response.status_code == status
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    if status == 400:
        assert "local host name" in response.text and "Fix the failing" not in response.text


def test_chart_geometry() -> None:
    from turnstore.web import charts

    bars = charts.rows("r", [("a", 4.0), ("b", 1.0), ("c", 0.0)], str)
    columns = charts.columns("c", [("d1", 2.0), ("d2", 8.0)], str)
    line = charts.line("l", [("d1", 0.5), ("d2", 1.5)], str)
    empty = charts.columns("e", [], str)

    assert [b.width for b in bars.bars] == [400.0, 100.0, 0.0] and bars.height == 3 * 22 + 4
    assert [b.height for b in columns.bars] == [45.0, 180.0]
    assert columns.bars[1].y == 24 and columns.bars[0].y + columns.bars[0].height == 24 + 180
    assert line.points == "24.0,114.0 696.0,24.0"  # a rate above 1 drawn at the top
    assert line.axis == [(24.0, "d1", "start"), (696.0, "d2", "end")]
    assert [label for _x, label, _anchor in columns.axis] == ["d1", "d2"]
    assert empty.empty and empty.axis == []


def _half_open(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send half a request line, and no more."""
    sockets = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"GET /?token=x HT")
        sockets.append(client)
    return sockets


def _closed(client: socket.socket, wait: float) -> bool:
    """Whether the server closed ``client`` (within ``wait`` seconds)."""
    client.settimeout(wait)
    try:
        return client.recv(1024) in (b"", _BUSY_PREFIX) or client.recv(1024) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


_BUSY_PREFIX = b"HTTP/1.1 503"


def test_slow_clients_cannot_hold_the_server(tmp_path: Path) -> None:
    """Half-sent requests were kept for ever (enough of them stopped the viewer): a request must arrive
    whole within --request-timeout, and past --max-connections the connection waiting longest goes, so a
    normal request is served at once however many half-open ones there are."""
    db = tmp_path / "demo.db"
    assert run_cli("--db", db, "demo").code == 0
    args = ("--host", "127.0.0.1", "--allow-remote", "--request-timeout", "2", "--max-connections", "40")
    process, port = _serve(db, *args)
    held: list[socket.socket] = []
    try:
        assert process.stdout is not None
        token = re.search(r"\?token=([A-Za-z0-9_-]{40,})", process.stdout.readline() + process.stdout.readline())
        assert token is not None
        held = few = _half_open(port, 10)  # under the bound: only the deadline closes them
        early = [_closed(client, 0.05) for client in few]
        timed_out = [_closed(client, 4) for client in few]
        held = few + _half_open(port, 300)
        started = time.monotonic()
        served = _status(f"http://127.0.0.1:{port}/?token={token.group(1)}")
        took = time.monotonic() - started
        late = [_closed(client, 4) for client in held]
        waited = time.monotonic() - started
    finally:
        for client in held:
            client.close()
        process.terminate()
        process.communicate(timeout=30)

    assert not any(early) and all(timed_out)
    assert served == 200 and took < 2, took
    assert all(late) and waited < 7, waited


def test_serve_documents_its_limits(tmp_path: Path) -> None:
    result = run_cli("serve", "--help")

    for option in ("--request-timeout", "--max-connections", "--keep-alive"):
        assert option in result.out
    assert run_cli("--db", tmp_path / "s.db", "serve", "--max-connections", "0").code == 2
    assert run_cli("--db", tmp_path / "s.db", "serve", "--request-timeout", "0").code == 2


@pytest.mark.parametrize("order", ["-cost", "cost", "-tokens", "tokens"])
def test_sessions_sort_by_cost_and_tokens(viewer: TestClient, store: Any, order: str) -> None:
    """The list sorted only by time or title: it sorts by cost and by tokens too, either way, pages
    included; sessions without usage come last."""
    rows = {row.session_id: row for row in store.usage.by_session()}

    def value(session_id: str) -> float:
        row = rows[session_id]
        return (
            float(row.cost or 0.0)
            if "cost" in order
            else float(row.input + row.output + row.cache_read + row.cache_write)
        )

    page = get(viewer, "/", order=order).text
    paged = listed(get(viewer, "/", order=order, per=2).text) + listed(
        get(viewer, "/", order=order, per=2, page=2).text
    )
    shown = listed(page)
    with_usage = [s for s in shown if s in rows]
    values = [value(s) for s in with_usage]

    assert len(with_usage) == len(rows) >= 3 and shown[: len(with_usage)] == with_usage
    assert values == sorted(values, reverse=order.startswith("-")) and len(set(values)) > 1
    assert paged == shown[:4]
    assert f'<option value="{order}" selected>' in page
    header = "tokens" if "tokens" in order else "cost"
    flipped = header if order.startswith("-") else f"-{header}"
    assert f"order={quote_plus(flipped)}" in page


def test_day_charts_label_days_at_readable_intervals_and_leave_undated_usage_out(store: Any, store_url: str) -> None:
    """The day charts labelled only their first and last bars, the first "?" (usage without a day), and
    drew messages without a timestamp as a bar on 1970-01-01: every day of the span stands on the axis,
    labels at readable intervals (the last always), undated usage is left out with a note."""
    store.sessions.create(session_id="days")
    loop_id = store.loops.start("days").loop_id
    day = 86_400_000
    start = 20_000 * day  # 2024-10-04
    for k, stamp in enumerate([0, start, start + 2 * day, start + 29 * day, 0]):
        store.messages.append_turn(loop_id, k, [user("q", timestamp=stamp), assistant("a", timestamp=stamp)])
    with Store(store_url, read_only=True) as read_only:
        page = get(TestClient(create_app(read_only)), "/spend").text

    svgs = re.findall(r'<svg class="chart-\w+".*?</svg>', page, re.S)
    ticks = [re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg) for svg in svgs[:3]]
    assert "1970-01-01" not in page and ">?<" not in page
    assert svgs[0].count('<rect class="bar"') == 30  # 2024-10-04 .. 2024-11-02, days without usage as 0
    for labels in ticks:
        assert 4 <= len(labels) <= 8 and labels[-1] == "2024-11-02"
        assert labels == sorted(labels) and all(re.fullmatch(r"\d{4}-\d\d-\d\d", label) for label in labels)
    assert svgs[2].count("<circle") == 3  # days with usage only
    note = text_of(page[page.index('id="undated"') :].split("</p>")[0])
    assert "Undated" in note and "220 tokens" in note  # two turns of (100 + 10) tokens


def test_chart_ticks() -> None:
    from turnstore.web import charts

    few = charts.columns("c", [(f"d{i}", 1.0) for i in range(5)], str)
    many = charts.columns("c", [(f"d{i}", 1.0) for i in range(120)], str)
    assert [label for _x, label, _anchor in few.axis] == [f"d{i}" for i in range(5)]
    assert len(many.axis) <= charts.MAX_TICKS and many.axis[-1][1] == "d119"
    assert all(0 <= x <= charts.WIDTH for x, _label, _anchor in many.axis)
