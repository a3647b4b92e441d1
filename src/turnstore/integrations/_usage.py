"""A framework's token counts as canonical usage, when its input count holds the cached tokens too.

OpenAI's Agents SDK, pydantic-ai and LangChain all count every input token in
``input_tokens``, cache reads and writes included; canonical ``input`` leaves
those out (they are priced apart). A live run is not a file to reject: counts
that disagree (more cached tokens than input, more reasoning than output, as a
provider may report) are clamped, never a failed save.
"""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import InvalidArgument
from ..models import Usage
from ..repositories._shared import problems


def inclusive_usage(
    *, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, reasoning: int, total_tokens: int
) -> Usage:
    """The usage of counts whose ``input_tokens`` include ``cache_read`` and ``cache_write``.

    ``input`` is what is left of ``input_tokens`` (0 when the cache parts exceed
    it), ``reasoning`` at most ``output_tokens``; ``total_tokens`` is kept as the
    framework reported it, 0 where it reported none (totals then count
    :attr:`~turnstore.models.Usage.total`).

    Raises:
        InvalidArgument: a count is negative or over 64 bits (one line naming it).
    """
    try:
        return Usage(
            input=max(input_tokens - cache_read - cache_write, 0),
            output=output_tokens,
            reasoning=min(reasoning, output_tokens),
            cache_read=cache_read,
            cache_write=cache_write,
            total_tokens=total_tokens,
        )
    except ValidationError as error:
        raise InvalidArgument(
            "usage", f"the framework reported token counts turnstore cannot keep: {problems(error)}"
        ) from None
