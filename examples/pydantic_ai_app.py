"""A pydantic-ai agent whose history lives in turnstore; runs offline with pydantic-ai's ``FunctionModel``.

pip install "turnstore[pydantic-ai]"
python examples/pydantic_ai_app.py [DB_URL]
"""

from __future__ import annotations

import sys
import tempfile

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from turnstore import Store
from turnstore.integrations.pydantic_ai import TurnstoreHistory


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a real model: asks for the weather tool once, then answers."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(part.part_kind == "user-prompt" for part in last.parts):
        call = ToolCallPart("weather", {"city": "Paris"}, tool_call_id="call-1")
        return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=120, output_tokens=14))
    return ModelResponse(
        parts=[TextPart("It is 18°C in Paris.")], usage=RequestUsage(input_tokens=160, output_tokens=9)
    )


agent: Agent[None, str] = Agent(FunctionModel(scripted_model), system_prompt="Be terse.")


@agent.tool_plain
def weather(city: str) -> str:
    """The weather in a city."""
    return f"18°C in {city}"


def main(url: str | None = None) -> None:
    folder = tempfile.TemporaryDirectory()
    store = Store(url or f"sqlite:///{folder.name}/app.db")  # default: a throwaway file
    history = TurnstoreHistory("weather-chat", store)
    for question in ["Weather in Paris?", "And now?"]:
        result = agent.run_sync(question, message_history=history.load())
        history.save(result)
        print(f"> {question}\n{result.output}")
    totals = store.usage.session("weather-chat")
    print(f"usage from turnstore: {totals.requests} requests, {totals.input} input, {totals.output} output tokens")
    store.close()
    folder.cleanup()


if __name__ == "__main__":
    main(*sys.argv[1:])
