"""PostgreSQL's search index holds turnstore's words as they are stored, not as its own parser and lowercasing make them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04

0007 indexed ``messages.search_text`` and ``search_thinking`` (words already
split and folded by turnstore, in Python) with ``to_tsvector('simple', ...)``,
which parses them again and lowercases each: PostgreSQL's parser drops
characters that Python counts as letters or digits but the database's locale
does not (hundreds of category ``No``), and its lowercasing maps Cherokee,
which Python case-folds to capitals, to small letters that no query holds. Such
words were never found on PostgreSQL, while SQLite (FTS5, ``ascii`` tokenizer:
it splits at ASCII spaces and folds nothing turnstore left) found them.

This revision adds the SQL function ``turnstore_search_words(words, weight)``,
which makes the ``tsvector`` through its input syntax: each space-separated
word, quoted, at its position, with the weight. Nothing parses or folds it
again, whatever the database's locale. ``ix_messages_search`` is rebuilt over
``turnstore_search_words(search_text, 'A') || turnstore_search_words(search_thinking, 'B')``;
the stored words do not change, so no message is read or rewritten (the index
is built by PostgreSQL's ``CREATE INDEX``, in ``maintenance_work_mem``). The
words of each column are numbered from 2, so the thinking's first word never
follows the text's last: 0007's index found a phrase across the two (the
text's last word, the thinking's first), which SQLite, matching each column
apart, does not.

The function is written out here, not imported: what upgrading does must not
change with later code. A word that could not be a lexeme (empty, or 2,048
bytes or more, which turnstore never stores) is left out instead of failing
the row's write.

SQLite: nothing changes.

Rollback: downgrade() puts 0007's index back and drops the function.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WORDS_FUNCTION = """
CREATE FUNCTION turnstore_search_words(words text, weight text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    lexemes text[] := '{}';
    place integer := 1;
    word text;
BEGIN
    FOREACH word IN ARRAY coalesce(string_to_array(words, ' '), '{}') LOOP
        IF word <> '' AND octet_length(word) < 2048 THEN
            place := place + 1;
            lexemes := lexemes || (
                chr(39) || replace(replace(word, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39))
                || chr(39) || ':' || place || weight
            );
        END IF;
    END LOOP;
    RETURN array_to_string(lexemes, ' ')::tsvector;
END
$$
"""
"""Each word of ``words`` (space-separated) at its position with ``weight``, as the ``tsvector`` input syntax
takes it: quoted, so no parser splits it and no dictionary lowercases it (positions past 16,383 are kept at
16,383, as ``to_tsvector`` keeps them). Positions start at 2: ``||`` puts the thinking's words after the
text's last position, so the gap keeps a phrase from running from the text into the thinking (on SQLite each
column is matched apart). PL/pgSQL appending to an array: linear in the words, and cheap per
call (a SQL function holding a query is planned again at every call, which costs more than the words)."""

INDEX = (
    "CREATE INDEX ix_messages_search ON messages USING gin (("
    "turnstore_search_words(search_text, 'A') || turnstore_search_words(search_thinking, 'B')))"
)
INDEX_0007 = (
    "CREATE INDEX ix_messages_search ON messages USING gin (("
    "setweight(to_tsvector('simple'::regconfig, coalesce(search_text, '')), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, coalesce(search_thinking, '')), 'B')))"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql(WORDS_FUNCTION)
    bind.exec_driver_sql("DROP INDEX IF EXISTS ix_messages_search")
    bind.exec_driver_sql(INDEX)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql("DROP INDEX IF EXISTS ix_messages_search")
    bind.exec_driver_sql(INDEX_0007)
    bind.exec_driver_sql("DROP FUNCTION IF EXISTS turnstore_search_words(text, text)")
