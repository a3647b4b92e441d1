from factories import assistant, tool_result, user

from turnstore import Store


def test_append_and_read_turn(store: Store, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant(calls=("c1",)), tool_result("c1")])
    assert len(ids) == 3
    turn = store.messages.turn(loop_id, 0)
    assert [m.role for m in turn.messages] == ["user", "assistant", "toolResult"]
