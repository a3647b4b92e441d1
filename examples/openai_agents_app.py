"""An OpenAI Agents SDK app whose session lives in turnstore; runs offline with a scripted model.

Run: ``python examples/openai_agents_app.py [DATABASE]`` (needs ``pip install "turnstore[openai-agents]"``).
The agent calls a tool, then answers; the session keeps every item, and
turnstore reports the run's usage.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.interface import Model
from agents.usage import InputTokensDetails, OutputTokensDetails
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from turnstore.aio import AsyncStore
from turnstore.integrations.openai_agents import TurnstoreSession


class ScriptedModel(Model):
    """A model that plays back canned responses, one per call, with their usage (no network)."""

    def __init__(self, responses: list[list[Any]]) -> None:
        self.responses = list(responses)
        self.calls = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        output = self.responses[self.calls % len(self.responses)]
        self.calls += 1
        usage = Usage(
            requests=1,
            input_tokens=100 + self.calls,
            input_tokens_details=InputTokensDetails(cached_tokens=10, cache_write_tokens=4),
            output_tokens=20 + self.calls,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=5),
            total_tokens=120 + 2 * self.calls,
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def script() -> list[list[Any]]:
    """A tool call, then the answer."""
    call = ResponseFunctionToolCall(type="function_call", call_id="call_1", name="add", arguments='{"a": 2, "b": 3}')
    text = ResponseOutputText(type="output_text", text="2 + 3 = 5", annotations=[])
    answer = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed", content=[text])
    return [[call], [answer]]


async def main(path: str) -> None:
    agent = Agent(
        name="calculator",
        instructions="Use the add tool.",
        model=ScriptedModel(script()),
        tools=[add],
    )
    async with await AsyncStore.open(path) as store:
        session = TurnstoreSession("calculator-demo", store)
        result = await Runner.run(
            agent,
            "What is 2 + 3?",
            session=session,
            run_config=RunConfig(tracing_disabled=True),
        )
        await session.record_usage(result)
        print("answer:", result.final_output)
        print("items stored:", len(await session.get_items()))
        totals = await store.usage.session("calculator-demo")
        print(
            f"usage from turnstore: input={totals.input} cache_read={totals.cache_read} "
            f"cache_write={totals.cache_write} output={totals.output} total_tokens={totals.total_tokens} "
            f"requests={totals.requests}"
        )
        sdk = result.context_wrapper.usage
        print(
            f"usage from the SDK:   input_tokens={sdk.input_tokens} output_tokens={sdk.output_tokens} "
            f"total_tokens={sdk.total_tokens} requests={sdk.requests}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(str(Path(directory) / "agents.db")))
