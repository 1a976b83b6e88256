"""The peer of `bench/turn_overhead.py --single-phase`: the same 4-agent round robin
in LangGraph, every step checkpointed by its SQLite checkpointer (SqliteSaver, a
file on disk, as Loom's default is), with a replay model that answers at once.

Each turn is one `invoke` on the same thread: the agent whose turn it is builds its
prompt from the whole history (as a real agent's call would), the replay model
answers with one short line, and the checkpointer persists the step. Prints the
median and p95 time per turn over the first and the last 100 turns and their ratio.

Install: .venv/bin/pip install -e '.[bench]'
Run:     .venv/bin/python bench/peers/langgraph_turns.py [--turns 1000]
"""

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

AGENTS = ["coach", "researcher", "coder", "reviewer"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    args = parser.parse_args()
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph
    except ImportError as exc:
        raise SystemExit(
            "LangGraph is not installed: .venv/bin/pip install -e '.[bench]'"
        ) from exc

    def agent_turn(state: MessagesState):
        turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        name = AGENTS[turn % len(AGENTS)]
        # The prompt an agent would send: its identity and the whole conversation.
        prompt = [("system", f"Your name is {name}.")] + [
            ("assistant" if isinstance(m, AIMessage) else "user", m.content)
            for m in state["messages"]
        ]
        line = f"{name}: noted, carrying on with item {len(prompt)}."
        return {"messages": [AIMessage(content=line, name=name)]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent_turn)
    graph.add_edge(START, "agent")
    path = Path(tempfile.mkdtemp(prefix="langgraph-bench-")) / "checkpoints.sqlite3"
    connection = sqlite3.connect(path, check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(connection))
    config = {"configurable": {"thread_id": "bench"}}
    app.invoke({"messages": [HumanMessage(content="Team goal: benchmark the turns.")]}, config)

    durations = []
    for _ in range(args.turns):
        start = time.perf_counter()
        app.invoke({"messages": []}, config)
        durations.append((time.perf_counter() - start) * 1000)

    def summary(values):
        ordered = sorted(values)
        return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]

    first, last = summary(durations[:100]), summary(durations[-100:])
    history = len(app.get_state(config).values["messages"])
    print(f"LangGraph with SqliteSaver (a file), {args.turns} turns, one thread")
    print(f"messages in the state at the end: {history}")
    print(f"first 100 turns: median {first[0]:.2f} ms, p95 {first[1]:.2f} ms")
    print(f"last 100 turns:  median {last[0]:.2f} ms, p95 {last[1]:.2f} ms")
    print(f"last/first median ratio: {last[0] / first[0]:.2f}")
    blocks = [statistics.median(durations[i : i + 100]) for i in range(0, len(durations), 100)]
    print("median of each 100 turns (ms):", " ".join(f"{b:.1f}" for b in blocks))


if __name__ == "__main__":
    main()
