"""The own-style script as a perf case, for the launcher tests (tests/multinode.py passes this file to pytest;
its name keeps it out of `make test`'s collection)."""

from pathlib import Path

from perfgate import Case, Flavour, OptimizerSteps, parametrize

CASES = [Case("own", "mlp", ("train.py",), cwd=str(Path(__file__).resolve().parent),
              records=OptimizerSteps(samples_per_step=64), cpu=Flavour({}, steps=6, warmup=2, timeout_s=300))]


@parametrize(CASES)
def test_own_script(perfgate, case):
    perfgate.check(case)
