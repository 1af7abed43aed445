"""The start-up points a rank marks (records.startup): stamped once each, in order, the process's own start from
/proc; the real launches' phases are asserted in test_workloads.py."""

import json
import subprocess
import sys
import time

import pytest

from perfgate.records import startup


def test_a_process_stamps_each_point_once_and_knows_when_it_began():
    """A fresh interpreter, so that this process's earlier marks do not count; its start is before its first mark
    and after the moment it was launched."""
    launched = time.time()
    code = ("import json, time; from perfgate.records import startup; startup.mark('imports'); time.sleep(0.05); "
            "startup.mark('imports'); startup.mark('model'); print(json.dumps(startup.marks()))")
    marks = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      timeout=120).stdout)
    assert list(marks) == ["process", "imports", "model"]
    assert launched - 0.05 <= marks["process"] <= marks["imports"] <= marks["model"] - 0.05


def test_an_unknown_point_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="'model_built' is not a start-up point \\(process, imports, process_group"):
        startup.mark("model_built")
