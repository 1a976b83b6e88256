"""The engine: what runs a turn. The agent loop (loop.py), the prompt an agent sees
(prompts.py, put together from system_text, history_rows, history_kept, cues and
claims), the model providers (providers.py, offline/) and the worker and sweeper
(worker.py). It sits above the domain (teams' models and services) and the tools, and
below the faces (admin, pages, consumers, commands)."""
