"""Stage 2, running it: a case and the settings become a ``plan``; a launcher (``local``, ``slurm``, ``ssh``)
starts its torchrun agents (``agents``) to the ``spec``, and ``diagnose`` names what went wrong when a run fails.
``hardware`` says what a node offers; ``node_agent`` is a remote node's side of a launch."""
