"""Team evals: a suite of cases run against fresh teams and checked (issue 38). The
suite file and its validation (suites), the checks that need no model (checks), the
rubric judge's request and verdict (judge: the call itself is the engine's), the runs
as rows (runs: create, advance through PM requests, record), the JSON report
(report), two runs side by side (compare).

pydantic-evals carries the scoring: each check is one of its Evaluators and a case is
scored by Dataset.evaluate over the team's finished outcome (checks), so a check that
raises is an evaluator failure recorded as a failed check, never a crashed run.

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
