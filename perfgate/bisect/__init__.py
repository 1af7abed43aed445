"""Which commit made a case slower: ``perfgate bisect GOOD BAD``, a binary search whose every step is an A/B
verdict of the gate (commits.py: the range and its worktrees; session.py: one verdict as a pytest session;
search.py: the three-way search; report.py: what it prints and draws; driver.py: the command)."""
