"""How a case ends without a verdict: skipped (it cannot run here) or failed (what happened, what to do).

The stages raise these; the plugin turns them into pytest's skip and fail, so no stage imports pytest
and each message is worded where its facts are.
"""


class CaseSkipped(Exception):
    """The case cannot run on this host or with these settings; the message says why and what would run it."""


class CaseFailed(Exception):
    """The case ran (or was refused) and failed; the message names the cause, the configuration and the logs."""
