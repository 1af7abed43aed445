"""``perfgate dashboard``: the results history (--perf-history) as a static site a team opens in a browser."""
