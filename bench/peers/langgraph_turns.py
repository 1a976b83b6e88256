"""The peer of `bench/turn_overhead.py --single-phase`: the same 4-agent round robin
in LangGraph, every step checkpointed by its SQLite checkpointer (SqliteSaver, a
file on disk, as Loom's default is), with a replay model that answers at once.

Two settings, both run by default (`--setting` picks one):

- "single run": one `stream` over all the turns with `durability="sync"`, four agent
  nodes in round robin over an `add_messages` list. LangGraph keeps the state in
  memory between steps and still writes every step's checkpoint before the next step
  starts, so it is as durable as Loom (a crash loses no finished turn). A turn's time
  is the time between two consecutive steps of the stream.
- "invoke per turn": one `invoke` per turn on the same thread, so each turn loads the
  thread's latest checkpoint (the whole history) and writes a new one, as a worker
  that picks a turn up from the database would.

In both, the agent whose turn it is builds its prompt from the whole history (as a
real agent's call would) and the replay model answers with one short line. Prints the
median and p95 time per turn over the first and the last 100 turns and their ratio.

Install: .venv/bin/pip install -e '.[bench]'
Run:     .venv/bin/python bench/peers/langgraph_turns.py [--turns 1000] [--setting single]
"""

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

AGENTS = ["coach", "researcher", "coder", "reviewer"]
GOAL = "Team goal: benchmark the turns."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--setting", choices=["single", "invoke", "both"], default="both")
    args = parser.parse_args()
    try:
        import langgraph  # noqa: F401
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        raise SystemExit("LangGraph is not installed: .venv/bin/pip install -e '.[bench]'") from exc
    if args.setting in ("single", "both"):
        report("single run (one stream, durability='sync')", single_run(args.turns))
    if args.setting in ("invoke", "both"):
        report("invoke per turn", invoke_per_turn(args.turns))


def _checkpointer():
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(tempfile.mkdtemp(prefix="langgraph-bench-")) / "checkpoints.sqlite3"
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def _answer(name: str, messages) -> str:
    """The agent's request (its identity and the whole conversation) and the replay
    model's one-line answer."""
    from langchain_core.messages import AIMessage

    prompt = [("system", f"Your name is {name}.")] + [
        ("assistant" if isinstance(m, AIMessage) else "user", m.content) for m in messages
    ]
    return f"{name}: noted, carrying on with item {len(prompt)}."


def single_run(turns: int):
    """Four nodes in a ring over an add_messages list, one stream over every turn."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    class State(TypedDict):
        messages: Annotated[list, add_messages]
        turn: int

    def node(name: str):
        def agent_turn(state: State):
            line = _answer(name, state["messages"])
            return {"messages": [AIMessage(content=line, name=name)], "turn": state["turn"] + 1}

        return agent_turn

    graph = StateGraph(State)
    for name in AGENTS:
        graph.add_node(name, node(name))
    graph.add_edge(START, AGENTS[0])
    for i, name in enumerate(AGENTS):
        after = AGENTS[(i + 1) % len(AGENTS)]
        graph.add_conditional_edges(
            name, lambda state, after=after: END if state["turn"] >= turns else after
        )
    app = graph.compile(checkpointer=_checkpointer())
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": turns + 10}
    durations = []
    start = time.perf_counter()
    for _update in app.stream(
        {"messages": [HumanMessage(content=GOAL)], "turn": 0},
        config,
        stream_mode="updates",
        durability="sync",
    ):
        now = time.perf_counter()
        durations.append((now - start) * 1000)
        start = now
    return durations, len(app.get_state(config).values["messages"])


def invoke_per_turn(turns: int):
    """One node that plays whichever agent's turn it is, one invoke per turn."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def agent_turn(state: MessagesState):
        turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        name = AGENTS[turn % len(AGENTS)]
        return {"messages": [AIMessage(content=_answer(name, state["messages"]), name=name)]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent_turn)
    graph.add_edge(START, "agent")
    app = graph.compile(checkpointer=_checkpointer())
    config = {"configurable": {"thread_id": "bench"}}
    app.invoke({"messages": [HumanMessage(content=GOAL)]}, config)
    durations = []
    for _ in range(turns):
        start = time.perf_counter()
        app.invoke({"messages": []}, config)
        durations.append((time.perf_counter() - start) * 1000)
    return durations, len(app.get_state(config).values["messages"])


def report(setting: str, run) -> None:
    durations, history = run

    def summary(values):
        ordered = sorted(values)
        return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]

    first, last = summary(durations[:100]), summary(durations[-100:])
    print(f"LangGraph with SqliteSaver (a file), {setting}: {len(durations)} turns, one thread")
    print(f"  messages in the state at the end: {history}")
    print(f"  first 100 turns: median {first[0]:.2f} ms, p95 {first[1]:.2f} ms")
    print(f"  last 100 turns:  median {last[0]:.2f} ms, p95 {last[1]:.2f} ms")
    print(f"  last/first median ratio: {last[0] / first[0]:.2f}")
    blocks = [statistics.median(durations[i : i + 100]) for i in range(0, len(durations), 100)]
    print("  median of each 100 turns (ms):", " ".join(f"{b:.1f}" for b in blocks))


if __name__ == "__main__":
    main()
