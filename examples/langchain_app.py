"""A LangChain chat whose history lives in turnstore; runs offline with LangChain's ``GenericFakeChatModel``.

pip install "turnstore[langchain]"
python examples/langchain_app.py [DB_URL]
"""

from __future__ import annotations

import sys
import tempfile

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from turnstore import Store
from turnstore.integrations.langchain import TurnstoreChatMessageHistory


def main(url: str | None = None) -> None:
    folder = tempfile.TemporaryDirectory()
    store = Store(url or f"sqlite:///{folder.name}/app.db")  # default: a throwaway file
    replies = [
        AIMessage("Hello Ann.", usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}),
        AIMessage("You are Ann.", usage_metadata={"input_tokens": 21, "output_tokens": 4, "total_tokens": 25}),
    ]
    model = GenericFakeChatModel(messages=iter(replies))  # stands in for a real chat model
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be terse."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = prompt | model
    history = TurnstoreChatMessageHistory("ann-chat", store)
    for question in ["I am Ann.", "Who am I?"]:
        answer = chain.invoke({"history": history.messages, "question": question})
        history.add_messages([HumanMessage(question), answer])  # the exchange, in one transaction
        print(f"> {question}\n{answer.content}")
    totals = store.usage.session("ann-chat")
    print(f"usage from turnstore: {totals.requests} requests, {totals.input} input, {totals.output} output tokens")
    store.close()
    folder.cleanup()


if __name__ == "__main__":
    main(*sys.argv[1:])
