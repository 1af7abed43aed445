"""--update-baselines: the case's runs, less the disturbed ones (re-measured in their place), written as its stored
baseline with where and how they were measured; a baseline from other hardware, another workload version or a
publication is refused unless --force-baseline-update says otherwise. One more launch, not one of its runs, records
the case's operators per step beside it (judge/profile_diff.py), for a later FAIL to name what got slower."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from perfgate.config.settings import Settings
from perfgate.judge import baselines, profile_diff
from perfgate.judge.gated import GatedMetrics
from perfgate.launch import hardware
from perfgate.launch.plan import Plan
from perfgate.measure import gpu_monitor, stats
from perfgate.measure.budget import launch_costs
from perfgate.measure.measurer import Measurement, Measurer
from perfgate.measure.metrics import METRICS
from perfgate.outcome import CaseFailed
from perfgate.result import Result


class ProfileNotRecordedWarning(UserWarning):
    """A new baseline without a profile beside it: a later FAIL names no operator against it."""


class BaselineUpdate:
    """Measures one planned case as its new baseline and writes it to ``where``; ``result`` shows old against new."""

    def __init__(self, plan: Plan, settings: Settings, measurer: Measurer, where: Path, gated: GatedMetrics, *,
                 root: Path, pytest_args: str, nvml: Callable[[], tuple[Any, str]]) -> None:
        self.plan = plan
        self.settings = settings
        self.measurer = measurer
        self.where = where
        self.gated = gated
        self.result = measurer.result
        self._root = root
        self._pytest_args = pytest_args
        self._nvml = nvml

    def run(self, old: baselines.Baseline | None) -> Result:
        self.refuse_foreign_overwrite(old)
        return self.update(old, self.measure_baseline())

    def measure_baseline(self) -> Measurement:
        """The baseline's runs; a disturbed run (see stats.disturbed) is measured again, up to half as many
        extra launches as planned, so one slow spell of a shared machine does not become the reference."""
        planned = self.settings.baseline_repeats
        measurement = self.measurer.measure(planned)
        for _ in range(planned // 2):
            if len(measurement.runs) - len(measurement.disturbed(self.gated.floors())) \
                    >= planned:
                break
            self.measurer.launch_once(planned + planned // 2)
        return measurement

    def refuse_foreign_overwrite(self, old: baselines.Baseline | None) -> None:
        """--update-baselines must not silently replace numbers from other hardware or another workload."""
        if old is None or self.settings.force_baseline_update:
            return
        plan = self.plan
        measured_on = old.provenance.get("hardware", {}).get("detected_class")
        if old.workload_version != plan.run.case.version:
            reason = f"workload version {old.workload_version} (the case is version {plan.run.case.version})"
        elif measured_on is None:
            reason = "a baseline perfgate did not measure on this kind of machine (a published reference?)"
        elif measured_on != plan.detected_class:
            reason = f"hardware class {measured_on} (this machine is {plan.detected_class})"
        else:
            return
        raise CaseFailed(f"{plan.run.key}: refusing to overwrite {self.where}: it holds {reason}. "
                         "Pass --force-baseline-update to replace it anyway.")

    def update(self, old: baselines.Baseline | None, measurement: Measurement) -> Result:
        """Writes the runs, less the disturbed ones, as the new baseline; the result shows old against new."""
        dropped = measurement.disturbed(self.gated.floors())
        new = self.new_baseline(measurement, dropped)
        baselines.write(self.where, new)
        self.profile_beside()
        rows = []
        for name, ref in new.metrics.items():
            before = old.metrics.get(name) if old else None
            rows.append({
                "metric": name, "unit": ref.unit, "measured": ref.value, "tolerance": ref.tolerance,
                "noise": stats.relative_spread(ref.runs), "runs": len(ref.runs), "run_values": list(ref.runs),
                "baseline": before.value if before else None,
                "change": (ref.value - before.value) / before.value if before else None, "verdict": "updated",
            })
        self.result.metrics, self.result.disturbed_runs = rows, len(dropped)
        self.result.conclude("updated")
        return self.result

    def profile_beside(self) -> None:
        """The new baseline's operators per step, beside it (profile_diff.beside), for a later FAIL's "what got
        slower": one more launch, never one of the baseline's runs. A case that cannot be profiled (an unmodified
        script) keeps none, and a later FAIL says why."""
        kept = profile_diff.beside(self.where)
        if self.measurer.why_not_profiled:
            kept.unlink(missing_ok=True)
            return
        try:
            summary = profile_diff.launch_summary(self.measurer.profile())
        except Exception as exc:  # the baseline is written: a profile that failed must not lose it
            kept.unlink(missing_ok=True)
            self.result.warn(ProfileNotRecordedWarning(f"{self.plan.run.key}: no profile recorded beside {self.where} "
                                                       f"(and none kept from before): {profile_diff.first_line(exc)}"))
            return
        baselines.write_json(kept, summary.reviewable().to_json())

    def new_baseline(self, measurement: Measurement, dropped: list[int]) -> baselines.Baseline:
        """The kept runs' medians, each with a fixed or noise-derived tolerance, and where they came from."""
        plan = self.plan
        run, flavour = plan.run, plan.run.flavour
        kept = Measurement([r for r in measurement.runs if r["run"] not in dropped], measurement.command)
        new_metrics = {}
        for name in self.gated.measured(kept):
            runs = tuple(float(f"{v:.6g}") for v in kept.values(name))
            clock = METRICS[name].clock
            tolerance = flavour.fixed_tolerance(clock)
            if tolerance is None:
                tolerance = round(stats.noise_tolerance(runs, flavour.least_tolerance(clock, run.kind)), 4)
            new_metrics[name] = baselines.MetricBaseline(
                value=float(f"{stats.median(runs):.6g}"), better=METRICS[name].better,
                tolerance=tolerance, unit=self.gated.unit(name), runs=runs,
            )
        provenance = hardware.provenance(plan.hardware, root=self._root, command=measurement.command,
                                         hardware_class_name=plan.hardware_class, nodes=plan.node_hardware)
        provenance["hardware"]["detected_class"] = plan.detected_class
        if run.kind == "gpu":
            nvml, why_not = self._nvml()
            provenance["hardware"]["nvml"] = gpu_monitor.fingerprint(nvml) or why_not
        return baselines.Baseline(
            case=run.key,
            hardware_class=plan.hardware_class,
            workload_version=run.case.version,
            metrics=new_metrics,
            provenance={**provenance, "pytest_args": self._pytest_args,
                        "warmup_steps": plan.warmup, "steps": plan.steps, "measured": kept.medians(),
                        "launch_s": launch_costs(measurement.runs),
                        "disturbed_runs": [{"run": r["run"], **{name: r["metrics"][name] for name in run.gated}}
                                           for r in measurement.runs if r["run"] in dropped]},
        )
