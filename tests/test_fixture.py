"""How a case's stage outcome reaches pytest: a CaseFailed is one failure, said once."""

import pytest

from perfgate.fixture import _as_pytest_outcome
from perfgate.outcome import CaseFailed
from perfgate.result import Result

FAILING = """
from perfgate.fixture import _as_pytest_outcome
from perfgate.outcome import CaseFailed

def test_case():
    with _as_pytest_outcome(None):
        raise CaseFailed("w-c-cpu: performance regression on k")
"""


def test_a_failed_case_prints_its_message_once_with_no_chained_traceback(pytester):
    pytester.makepyfile(test_failing=FAILING)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert output.count("w-c-cpu: performance regression on k") == 1, output
    assert "During handling of the above exception" not in output


def test_the_failure_is_kept_in_the_result_record():
    result = Result(case="w-c-cpu", test="suite.py::test[c-cpu]", hardware_class="k", world_size=1)
    result.conclude("FAIL")
    with pytest.raises(pytest.fail.Exception) as failed:
        with _as_pytest_outcome(result):
            raise CaseFailed("w-c-cpu: performance regression on k")
    assert failed.value.__suppress_context__
    assert (result.verdict, result.message) == ("FAIL", "w-c-cpu: performance regression on k")
