"""Stage 5, what the user reads: the ``terminal`` summary and JUnit properties, pytest-benchmark JSON
(``benchmark_json``), and a report ``directory`` of ``markdown`` and ``plots``; ``history`` reads baselines
across git history."""
