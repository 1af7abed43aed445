"""Stage 4, the verdict: the ``gate`` against stored ``baselines``, or ``ab`` against another revision built in a
worktree (``revision``), and the machines perfgate knows (``known``)."""
