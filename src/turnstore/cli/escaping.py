"""Stored text made safe for the terminal: every way out of the CLI goes through here.

Stored values (titles, model names, message text, tool arguments, file names
in import errors) are hostile: a raw ESC, a C1 control or a bidi override
reaching a terminal can clear the screen, set the window title, write the
clipboard (OSC 52), hide a link (OSC 8) or reorder what the reader sees.

* :func:`visible` is for people: each such character becomes a visible escape
  (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\n``), on a terminal and in pipes alike.
  Rich then gets the result as :class:`rich.text.Text`, never as markup, so
  ``[bold red]`` prints as written.
* :func:`shell_word` is for a command printed to be pasted into a shell: one
  word that reads back as exactly the text, in printable characters only.
* :func:`json_safe` is for ``--json`` and exports to stdout: JSON itself escapes
  only C0 controls; the same characters beyond C0 (DEL, C1, bidi controls,
  zero-width characters, line and paragraph separators, lone surrogates) become ``\\uXXXX`` escapes, which every JSON
  parser reads back as the original character. They only ever occur inside
  JSON strings, so the text stays valid JSON with the same value.
"""

from __future__ import annotations

import shlex

__all__ = ["UNSAFE", "json_safe", "shell_word", "visible"]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""Arabic letter mark, LRM/RLM, embeddings and overrides (LRE..RLO), isolates (LRI..PDI)."""

_INVISIBLE = (0x200B, 0x2060, 0xFEFF)
"""Zero-width space, word joiner, BOM: they make ``s\\u200bid`` look like ``sid``. (The zero-width
(non-)joiners stay: emoji sequences and several scripts need them.)"""

_SURROGATES = range(0xD800, 0xE000)
"""Lone surrogates: file names that are not UTF-8 reach Python as ``\\udcXX``; written raw they are not UTF-8."""

UNSAFE: frozenset[int] = frozenset(
    (*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, *_INVISIBLE, 0x2028, 0x2029, *_SURROGATES)
)
"""Code points that never reach the terminal raw: C0, DEL, C1, bidi controls, zero-width characters,
line/paragraph separators, lone surrogates."""

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}

_VISIBLE = {point: _NAMED.get(point) or (f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}") for point in UNSAFE}
_JSON = {point: f"\\u{point:04x}" for point in UNSAFE if point >= 0x20}


def visible(text: str) -> str:
    """``text`` with every control and bidi character shown as an escape, for human output."""
    return text.translate(_VISIBLE)


def json_safe(text: str) -> str:
    """JSON text (as ``json.dumps`` writes it) with DEL, C1 and bidi characters escaped as ``\\uXXXX``."""
    return text.translate(_JSON)


def shell_word(text: str) -> str:
    """``text`` as one shell word that reads back as exactly its bytes and prints safely.

    POSIX quoting (:func:`shlex.quote`) when ``text`` holds nothing
    :func:`visible` would escape; otherwise bash's ``$'...'`` quoting (also
    zsh's and ksh's), with each such character written as the ``\\xHH``
    escapes of its UTF-8 bytes, whatever the shell's locale. A lone surrogate
    from a file name that is not UTF-8 is the one byte it stands for.
    """
    if not any(ord(char) in UNSAFE for char in text):
        return shlex.quote(text)
    out = []
    for char in text:
        point = ord(char)
        if char in "\\'":
            out.append("\\" + char)
        elif point not in UNSAFE:
            out.append(char)
        elif point < 0x80:
            out.append(_VISIBLE[point])
        elif 0xDC80 <= point <= 0xDCFF:  # surrogateescape: the byte point - 0xDC00
            out.append(f"\\x{point - 0xDC00:02x}")
        else:
            out.append("".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass")))
    return "$'" + "".join(out) + "'"
