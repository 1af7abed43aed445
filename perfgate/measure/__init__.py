"""Stage 3, measuring: ``measurer`` runs a case's launches and turns their records into ``metrics``, with the
GPUs' samples (``gpu_monitor``), the planted slowdown (``plant``), FLOP counts (``flops``), the statistics
(``stats``) and the live ``progress`` line."""
