"""The step records a run leaves: the contract between a workload and perfgate.

``steps`` is the writer the workloads use (light: no pytest, torch only on GPU) and its reader; ``sources``
says where a case's records are and how to follow them; ``openclip_log`` reads upstream open_clip's log as
records. Every stage may read records; this package imports no other stage."""
