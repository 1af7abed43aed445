"""What got slower: two sides' torch.profiler summaries set side by side, operator by operator.

A side's summary is what a profiled launch's ranks wrote (workloads/train_common.StepProfile): per operator, its calls
and self time per step, by CPU and, on a GPU, by the device. The diff takes each side's mean over its ranks, naming
the slowest (the most self time per step, the one DDP's steps wait for), and names the operators whose time per step grew most, those added and
those gone, each with its share of the whole step's growth. torch.profiler's own aggregates (``key_averages``) are
diffed, so no trace is parsed; the traces stay beside the logs, for Perfetto.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from perfgate.records.steps import RecordsError

TOP = 5
NOISE_SHARE = 0.10
"""An operator whose time per step grew beyond the step's own growth by less than this share of the step is not
named: two profiles of unchanged code, launched one after the other, differed by up to 9 % of the step
(tests/test_profile_launch.py), while the code changes it names grew 14-60 % of it."""
SUMMARY = "profile-rank{rank}.json"
COLLECTIVES = ("c10d::", "nccl", "gloo:")
"""Operators and kernels of collectives: c10d's ops, and NCCL's device kernels (``ncclDevKernel_...``)."""
KEPT_SHARE = 0.001
"""The least share of the step an operator of a baseline's profile summary takes to be listed by name."""
OTHERS = "(the others, each under 0.1 % of the step)"


class ProfileError(ValueError):
    """A profile summary that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Summary:
    """One rank's operators: name -> calls and self microseconds per step (CPU and device)."""

    ops: Mapping[str, Mapping[str, float]]
    rank: int
    steps: int

    def time_us(self, name: str) -> float:
        op = self.ops.get(name) or {}
        return float(op.get("self_cpu_us", 0.0)) + float(op.get("self_device_us", 0.0))

    @property
    def step_us(self) -> float:
        return sum(self.time_us(name) for name in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "rank": self.rank, "ops": {name: dict(op) for name, op in sorted(self.ops.items())}}

    def reviewable(self) -> Summary:
        """The operators that take at least KEPT_SHARE of the step, the rest summed as one: what a baseline keeps."""
        floor = KEPT_SHARE * self.step_us
        kept = {name: op for name, op in self.ops.items() if self.time_us(name) >= floor}
        rest = [name for name in self.ops if name not in kept]
        if rest:
            kept[OTHERS] = {"calls": sum(float(self.ops[n].get("calls", 0.0)) for n in rest),
                            "self_cpu_us": sum(float(self.ops[n].get("self_cpu_us", 0.0)) for n in rest),
                            "self_device_us": sum(float(self.ops[n].get("self_device_us", 0.0)) for n in rest)}
        return Summary(kept, self.rank, self.steps)

    @classmethod
    def from_json(cls, data: Any, where: str) -> Summary:
        fields = ("calls", "self_cpu_us", "self_device_us")
        if (not isinstance(data, dict) or not isinstance(data.get("ops"), dict)
                or not isinstance(data.get("rank", 0), int) or not isinstance(data.get("steps", 1), int)
                or not all(isinstance(op, dict) and all(isinstance(op.get(f, 0.0), (int, float)) for f in fields)
                           for op in data["ops"].values())):
            raise ProfileError(f"{where}: not a profile summary (expected {{\"steps\": N, \"rank\": R, \"ops\": "
                               "{name: {\"calls\", \"self_cpu_us\", \"self_device_us\"}}})")
        return cls(data["ops"], data.get("rank", 0), data.get("steps", 1))


def first_line(exc: BaseException) -> str:
    """An error's first line, or its type where it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def beside(baseline_file: Path) -> Path:
    """Where --update-baselines keeps a baseline's profile summary: ``<case>.profile.json`` beside its file."""
    return baseline_file.with_name(f"{baseline_file.stem}.profile.json")


def read(path: Path) -> Summary:
    try:
        return Summary.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: {exc}") from None


def ranks(directory: Path) -> list[Summary]:
    """Every rank's summary of a profiled launch; ProfileError where none wrote one."""
    found = [read(path) for path in sorted(directory.glob(SUMMARY.format(rank="*")))]
    if not found:
        raise ProfileError(f"{directory}: no rank wrote a profile summary ({SUMMARY.format(rank='<R>')})")
    return found


def launch_summary(directory: Path) -> Summary:
    """A profiled launch as one summary: each operator's mean over the ranks (steadier than any one rank beside a
    neighbour), named after the slowest rank, the one DDP's steps wait for."""
    found = ranks(directory)
    slowest = max(found, key=lambda summary: summary.step_us)
    names = {name for summary in found for name in summary.ops}
    fields = ("calls", "self_cpu_us", "self_device_us")
    ops = {name: {field: sum(float((s.ops.get(name) or {}).get(field, 0.0)) for s in found) / len(found)
                  for field in fields} for name in names}
    return Summary(ops, slowest.rank, slowest.steps)


def overhead(step_times: Sequence[float], first: int, count: int) -> float | None:
    """How much slower the profiled steps ran than the launch's other steps after the warm-up (the profiler's own
    cost, on the step it measures); None where there are no steps beside them."""
    profiled = step_times[first:first + count]
    others = step_times[first + count:]
    if not profiled or not others:
        return None
    return statistics.median(profiled) / statistics.median(others) - 1


def waiting(summary: Summary) -> float:
    """The step's time in collectives (``c10d::`` operators): on a rank, mostly its wait for the others."""
    return sum(summary.time_us(name) for name in summary.ops if name.startswith(COLLECTIVES))


def diff(reference: Summary, current: Summary, top: int = TOP) -> list[dict[str, Any]]:
    """The operators whose share of the step grew most, most first: each one's time per step beyond what it would
    take had it grown as the whole step did (``excess_us``), named where that is at least NOISE_SHARE of the step.
    Shares, not times: a neighbour on the cores slows every operator alike, a code change the one it changed.
    Collectives are left to ``waiting``: their time is the wait for the other ranks, which a neighbour moves by more
    than the code does."""
    computing = [name for name in set(reference.ops) | set(current.ops) if not name.startswith(COLLECTIVES)]
    before_total = sum(reference.time_us(name) for name in computing)
    after_total = sum(current.time_us(name) for name in computing)
    scale = after_total / before_total if before_total else 1.0
    growth = current.step_us - reference.step_us
    rows = []
    for name in computing:
        before, after = reference.time_us(name), current.time_us(name)
        excess = after - before * scale
        if excess < NOISE_SHARE * after_total:
            continue
        kind = ("slower" if name in reference.ops else "new, or under 0.1 % of the step before"
                if OTHERS in reference.ops else "added")
        rows.append({"op": name, "kind": kind, "before_us": before,
                     "after_us": after, "excess_us": excess,
                     "share": (after - before) / growth if growth > 0 and after > before else None,
                     "calls_before": float((reference.ops.get(name) or {}).get("calls", 0.0)),
                     "calls_after": float((current.ops.get(name) or {}).get("calls", 0.0))})
    return sorted(rows, key=lambda row: row["excess_us"], reverse=True)[:top]


def describe(rows: Sequence[Mapping[str, Any]], reference: Summary, current: Summary,
             cost: float | None = None) -> list[str]:
    """The "what got slower" lines of a FAIL message; ``cost``: the profiler's own on this side's steps."""
    slowed = f"; the profiler slowed its steps {cost:+.0%}" if cost is not None else ""
    head = (f"what got slower (torch.profiler, self time per step, the mean over the ranks, the slowest rank "
            f"{current.rank}: {reference.step_us / 1e3:.1f} -> {current.step_us / 1e3:.1f} ms, of which in collectives "
            f"{waiting(reference) / 1e3:.1f} -> {waiting(current) / 1e3:.1f} ms{slowed})")
    if not rows:
        return [f"{head}: no operator grew by {NOISE_SHARE:.0%} of the step or more"]
    lines = [head + ":"]
    for row in rows:
        share = f", {row['share']:.0%} of the growth" if row["share"] is not None else ""
        calls = f", calls {row['calls_before']:g} -> {row['calls_after']:g}" \
            if row["kind"] == "slower" and row["calls_before"] != row["calls_after"] else ""
        lines.append(f"    {row['op']}: {row['before_us'] / 1e3:.2f} -> {row['after_us'] / 1e3:.2f} ms"
                     f" ({row['kind']}{share}{calls})")
    return lines


def what_got_slower(measurer: Any, reference: Any, result: Any, plan: Any, no_launch: str = "") -> str:
    """Lines naming the operators whose time per step grew most, from a profiled launch of this side (``measurer``)
    against the reference's profile; what was not profiled, and why (``no_launch``: --perf-budget's reason to launch
    no more), otherwise. The launches are never judged; what they find goes into ``result.profile``."""
    if no_launch:
        return f"what got slower: not profiled ({no_launch})\n"
    began = time.monotonic()
    try:
        directory = measurer.profile()
        current = launch_summary(directory)
    except Exception as exc:  # what got slower only explains a FAIL: nothing in it may lose the FAIL
        return f"what got slower: not profiled ({first_line(exc)})\n"
    try:
        steps = [step.step_s for step in plan.run.case.records.read(directory).steps]
    except (RecordsError, OSError):
        cost = None
    else:
        cost = overhead(steps, plan.warmup, current.steps)
    try:
        theirs = reference.profile()
    except Exception as exc:
        theirs, why = None, first_line(exc)
    else:
        why = "" if theirs is not None else reference.no_profile
    result.profile = {"rank": current.rank, "step_us": current.step_us, "launches_s": time.monotonic() - began,
                      "dir": str(directory), "profiler_cost": cost,
                      "reference_step_us": theirs.step_us if theirs else None,
                      "rows": diff(theirs, current) if theirs else []}
    if theirs is None:
        top = ", ".join(f"{name} {current.time_us(name) / 1e3:.2f} ms"
                        for name in sorted(current.ops, key=current.time_us, reverse=True)[:TOP])
        return f"what got slower: no profile of the reference ({why}); this side's most time per step: {top}\n"
    return "\n".join(describe(result.profile["rows"], theirs, current, cost)) + "\n"
