"""A/B's comparison of each gated metric, pair by pair: the candidate's launches against the reference's launched
beside them (stats.compare_pairs, decided by stats.decide). The stored baseline's verdict is the model's
(judge/model.py), which does not judge pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from perfgate.judge.baselines import Baseline
from perfgate.measure import stats


class PairsError(ValueError):
    """A gated metric the candidate's launches did not measure."""


@dataclass(frozen=True)
class MetricVerdict:
    """One metric of the current runs judged against its baseline's runs."""

    metric: str
    better: str
    unit: str
    tolerance: float
    baseline: float
    measured: float
    runs: int
    comparison: stats.Comparison
    decision: stats.Decision

    @property
    def change(self) -> float:
        """Relative change of the medians: +0.05 means 5 % above the baseline."""
        return self.comparison.change

    @property
    def outcome(self) -> str:
        return self.decision.outcome

    def describe(self) -> str:
        return (
            f"{self.metric} ({self.better} is better): measured {self.measured:.6g} {self.unit} "
            f"(median of {self.runs} run{'s' if self.runs != 1 else ''}) vs baseline {self.baseline:.6g} {self.unit}: "
            f"{self.change:+.1%} (tolerance {self.tolerance:.1%}); {self.decision.reason}"
        )


def judge(baseline: Baseline, current: Mapping[str, Sequence[float]],
          compare: Callable[[Sequence[float], Sequence[float]], stats.Comparison],
          resolve: float | None = None) -> list[MetricVerdict]:
    """Judges every metric the reference gates from the candidate's runs of it, pair by pair (``compare``:
    stats.compare_pairs at the confidence asked; ``resolve``: see stats.decide)."""
    verdicts = []
    for name, ref in baseline.metrics.items():
        values = [v for v in current.get(name, ()) if v is not None]
        if not values:
            raise PairsError(f"baseline of {baseline.case} gates {name!r}, which this run did not measure")
        comparison = compare(ref.samples, values)
        verdicts.append(MetricVerdict(
            metric=name, better=ref.better, unit=ref.unit, tolerance=ref.tolerance,
            baseline=stats.median(ref.samples), measured=stats.median(values), runs=len(values),
            comparison=comparison, decision=stats.decide(comparison, ref.better, ref.tolerance, resolve=resolve),
        ))
    return verdicts
