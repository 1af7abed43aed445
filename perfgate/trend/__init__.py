"""Every run in a results database, and the change points of its history: ``--perf-history URL`` writes
(recorder.py, through database.py), ``perfgate trend`` reads (command.py: analysis.py cuts each series at the
change points that changepoints.py finds with Apache Otava)."""
