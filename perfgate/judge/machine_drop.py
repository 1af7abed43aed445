"""A regression in a session whose machine ran slower by as much, on the clock the regression was read on.

The machine-speed probe runs the same two kernels whatever the code does, a matmul (compute) and a 64 MiB copy
(memory), outside the window, and on a CPU reads each on two clocks: its rate by the wall clock, and by its own
thread's CPU time. A neighbour's job that overlaps the session takes turns on the cores: it drops the probe's
wall-clock rates and the wall clock's metrics, while the probe's CPU-time rates and the CPU clock's metrics, blind to
the slices given to other work, hold. A slower core (its clocks), or memory shared with another tenant of the host,
drops both of a kernel's rates and moves both clocks; the two kernels drift apart, so the machine's drop on a clock is
the larger of the two kernels' (a step mixes compute and memory, and slows by no more than the slower of them). On the
2-core VM a quiet session a day after its baselines read the CPU clock 12-40 % worse in 5 cases of 7 while the copy
ran 15-35 % slower (by the wall clock, in a quiet session) and the matmul 2-17 % by its CPU time
(docs/measurements.md). More work per step moves both clocks and neither kernel.
So a FAIL that the probe's drop on its own clock covers (within the metric's tolerance: the probe is a snapshot) is
unresolved rather than FAIL, in a case that gates the CPU clock, where every CPU-clock FAIL is so covered: the machine
is the likelier cause, and only A/B in one job can tell. A case that gates no CPU-clock metric (a GPU flavour's
default, whose probe reads no CPU time) keeps its FAIL; a procurement check of a CPU machine that must fail on a
slower machine adds --fail-unresolved. The probe does not calibrate the values (``--perf-calibrate``): its snapshots
around a window exaggerate or miss a burst, and scaling by them moved unchanged sessions far more than the drift it
corrects (docs/measurements.md#why-the-rules-are-what-they-are). Two rules read the wall clock of a CPU flavour
apart: beside a neighbour (the probe's thread got less of the cores than at the baseline) and with no history of the
case here (wall_alone), a wall-clock FAIL that the CPU clock does not back is unresolved. Under A/B, whose pairs
meet the machine's speed on both sides, one rule reads the probe: pairs launched in turn beside a neighbour
(in_turn_beside_a_neighbour).
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, NamedTuple, Sequence

from perfgate.judge.session_spread import worsening
from perfgate.measure.metrics import MACHINE_PROBES, METRICS, scaled_by_probe


class Drop(NamedTuple):
    """How much slower the probe read than the baseline's (negative: slower), and which reading that was."""

    change: float
    probe: str


def probe_change(then: Mapping[str, Any], now: Mapping[str, Any], probe: str) -> float | None:
    """The runs' median ``probe`` against the baseline's (negative: the machine ran slower); None without both."""
    before, after = then.get(probe), now.get(probe)
    return after / before - 1.0 if before and after else None


def probe_drop(then: Mapping[str, Any], now: Mapping[str, Any], clock: str) -> Drop | None:
    """The probe's reading on ``clock`` ("wall" or "cpu") that changed most for the worse since the baseline; None
    where neither kernel was read both times (a baseline from before the probe read it)."""
    changes = [Drop(change, probe) for probe in MACHINE_PROBES[clock]
               if (change := probe_change(then, now, probe)) is not None]
    return min(changes, default=None)


def judge(verdicts: Sequence[Any], outcomes: Sequence[str], machine: Drop | None, *, raw: Sequence[str],
          worse: Sequence[float], cores: Drop | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """The outcomes once the probe's drop is weighed, and a row per FAIL it covers (left unresolved). ``verdicts``:
    the gate's MetricVerdicts; ``outcomes`` their outcomes so far; ``raw`` their outcomes against the baseline alone
    (whether the CPU clock held is read there, before any other rule); ``worse``: how much worse each is than what it
    FAILed against; ``machine`` and ``cores``: the machine's drop by the wall clock and by CPU time (probe_drop)."""
    settled = list(outcomes)
    cpu = [index for index, verdict in enumerate(verdicts) if clock(verdict.metric) == "cpu"]
    if not cpu or not any(drop is not None and drop.change < 0 for drop in (machine, cores)):
        return settled, []
    drops = [drop_on(verdict.metric, machine, cores) for verdict in verdicts]
    if not all(covered(verdicts[index], worse[index], drops[index]) for index in cpu if raw[index] == "FAIL"):
        return settled, []
    rows = []
    for index, (verdict, drop) in enumerate(zip(verdicts, drops)):
        if settled[index] == "FAIL" and covered(verdict, worse[index], drop):
            settled[index] = "unresolved"
            rows.append({"rule": "machine slower", "metric": verdict.metric, "change": verdict.change,
                         "probe_change": drop.change, "probe": drop.probe, "explained": explained(verdict, drop)})
    return settled, rows


def wall_alone(verdicts: Sequence[Any], outcomes: Sequence[str], machine: Drop | None, known: Collection[str] = (),
               cores: Drop | None = None, worse: Sequence[float] = ()) -> tuple[list[str], list[dict[str, Any]]]:
    """A CPU flavour's FAIL on the wall clock alone, where the CPU clock it also gates held, is unresolved while no
    history says how far that metric strays between sessions here (``known``: the metrics session_spread judged,
    which decides them instead). Held: each CPU-clock metric decided pass or stale (not even an unproven worsening)
    and none significantly worse, even within its tolerance; or worse by no more than the probe's drop by CPU time
    (``cores``) explains, however it was decided (``worse``: how much worse each is than what it FAILed against,
    judge's; by default against the baseline) and not significantly worse than the drop alone explains
    (within_slower_cores). Slower code on a CPU does more work and moves both clocks, as every
    planted slowdown does; a session given less of the cores than its baseline's moves the wall clock alone: the
    U-Net with a loader worker, 4 processes on a 2-core VM, read its fastest step 11.7-16.4 % slower in unchanged
    quiet sessions with its CPU clock within tolerance (issue 47). Slower cores move the CPU clock as far as they
    slowed, and no further: on the Intel family 6 model 207 VM an unchanged ResNet-50 read its fastest step 10.9 %
    slower 30 minutes after its baselines, its CPU clock +8.8 % (not significant in 3 runs) while the probe's matmul
    ran 4.1 % slower by its CPU time, which explains 9.8 % (docs/measurements.md)."""
    settled = list(outcomes)
    worse = list(worse) or [worsening(verdict.change, verdict.better) for verdict in verdicts]
    cpu = [index for index, verdict in enumerate(verdicts) if clock(verdict.metric) == "cpu"]
    explains = {index: within_slower_cores(verdicts[index], worse[index], cores) for index in cpu}
    if not cpu or not all(explains[index] or held_still(verdicts[index]) for index in cpu):
        return settled, []
    held = ", ".join(f"{verdicts[index].metric} {verdicts[index].change:+.1%}"
                     + (within_cores(verdicts[index], cores) if explains[index] else "") for index in cpu)
    rows = []
    for index, verdict in enumerate(verdicts):
        if (clock(verdict.metric) == "wall" and moves_with_speed(verdict.metric) and settled[index] == "FAIL"
                and verdict.metric not in known):
            settled[index] = "unresolved"
            rows.append({"rule": "wall alone", "metric": verdict.metric, "change": verdict.change,
                         "probe_change": None if machine is None else machine.change,
                         "probe": None if machine is None else machine.probe, "cpu_clock_held": held})
    return settled, rows


def held_still(verdict: Any) -> bool:
    """Whether a metric held against the baseline: decided pass or stale, and not significantly worse even within its
    tolerance."""
    return verdict.outcome in ("pass", "stale") and verdict.comparison.worse(verdict.better)[1] <= 0


def within_slower_cores(verdict: Any, worse: float, cores: Drop | None) -> bool:
    """Whether a CPU-clock metric moved no further than slower cores explain: worse by no more than the probe's drop
    by CPU time and its tolerance allow (covered), and not significantly worse than the drop alone explains."""
    drop = drop_on(verdict.metric, None, cores)
    return (covered(verdict, worse, drop)
            and verdict.comparison.worse(verdict.better)[1] <= explained(verdict, drop, tolerance=0.0))


def within_cores(verdict: Any, cores: Drop) -> str:
    """How a CPU-clock metric held within the probe's drop by CPU time, for a message."""
    return (f", within the {explained(verdict, cores):.1%} that the probe's {kernel(cores.probe)} running "
            f"{cores.change:+.1%} per second of its CPU time explains")


def turns_taken(then: Mapping[str, Any], now: Mapping[str, Any]) -> float | None:
    """How much less of the cores the probe's thread got than at the baseline: its matmul's wall-clock rate against
    its CPU-time rate, set against the same ratio then (negative: a neighbour took turns on the cores); None without
    both readings both times. The matmul's, not the copy's: memory shared with another tenant moves both of the
    copy's readings, turns on the cores the wall clock's alone."""
    before, after = core_shortfall(then), core_shortfall(now)
    return None if before is None or after is None else (1.0 + after) / (1.0 + before) - 1.0


def beside_a_neighbour(verdicts: Sequence[Any], outcomes: Sequence[str], turns: float | None, *,
                       raw: Sequence[str], held: Collection[str] = ()) -> tuple[list[str], list[dict[str, Any]]]:
    """A CPU flavour's wall-clock FAIL in a session where the probe saw a neighbour take turns on the cores (its
    thread got less of them than at the baseline, by more than the metric's tolerance) is unresolved while no
    CPU-clock metric FAILed, against the baseline (``raw``) or after the other rules, once the gate has measured
    until the CPU clock decided or the repeat cap (awaits_cpu_clock). The probe is one thread; a workload of several
    processes sharing the cores with a neighbour slows further (its ranks wait for the slowest, its loader workers
    queue too): beside two busy processes the U-Net with a loader worker read its fastest step 44.6 % slower while
    the probe's thread got 30 % less of the cores, and its CPU clock +32.3 %, not significant after 3 runs
    (docs/measurements.md). Slower code does more work and moves the CPU clock, which the turns do not slow; a CPU
    clock that stayed inconclusive to the cap counts as not FAILed, and a regression that only waits (a sleep, a
    lock) is left unresolved too. So is one whose spread the history knows: sessions count as like this one by the
    probe's wall-clock rate, which a neighbour's turns and slower cores drop alike, so they mix quiet sessions on
    slower cores with loaded ones, and say little of how far a neighbour moves a workload of several processes. On
    the Intel family 6 model 207 VM a ResNet-50 beside two busy processes (the probe's thread 32 % off the cores)
    read its fastest step 41.7 % slower and its CPU clock 15.4 % better than the baseline: with 15 other sessions
    stored, those like it by the probe allowed 40.4 %, and it FAILed (docs/measurements.md). A CPU-clock FAIL that
    another rule left unresolved as within what the machine does (``held``: the probe's drop by CPU time covers it,
    held_on_slower_cores, or the spread between sessions holds it) held as far as the machine let it, and is no
    sign of more work: beside two busy processes the OpenCLIP bf16 case read its CPU clock 6.5 % worse while the
    probe's CPU-time rate ran 7.0 % slower, and its fastest step 42.0 % slower while the probe's thread got 32 % less
    of the cores (docs/measurements.md)."""
    settled = list(outcomes)
    cpu = [index for index, verdict in enumerate(verdicts) if clock(verdict.metric) == "cpu"]
    if turns is None or not cpu or any("FAIL" in (raw[index], settled[index]) and not (
            settled[index] == "unresolved" and verdicts[index].metric in held) for index in cpu):
        return settled, []
    rows = []
    for index, verdict in enumerate(verdicts):
        if (settled[index] == "FAIL" and clock(verdict.metric) == "wall" and moves_with_speed(verdict.metric)
                and turns < -verdict.tolerance):
            settled[index] = "unresolved"
            rows.append({"rule": "neighbour", "metric": verdict.metric, "change": verdict.change,
                         "turns_taken": turns,
                         "cpu_clock": ", ".join(f"{verdicts[i].metric} {verdicts[i].change:+.1%} {settled[i]}"
                                                for i in cpu)})
    return settled, rows


def core_shortfall(medians: Mapping[str, Any]) -> float | None:
    """How much less than a whole core the probe's thread got in these runs: its matmul's wall-clock rate against
    its CPU-time rate, less one (negative: something else took turns on the cores); None without both readings. A
    quiet machine reads about 0: -1.6..0 % in every CPU baseline measured on the 2-core VMs, those with loader workers
    too (the probe runs outside the window)."""
    wall, cpu = medians.get("probe_matmul_gflops"), medians.get("probe_matmul_cpu_gflops")
    return wall / cpu - 1.0 if wall and cpu else None


def in_turn_beside_a_neighbour(verdicts: Sequence[Any], outcomes: Sequence[str], reference: float | None,
                               candidate: float | None) -> tuple[list[str], list[dict[str, Any]]]:
    """An A/B FAIL of a CPU flavour whose pairs ran one launch after the other while a neighbour took turns on the
    cores is unresolved where those turns explain it. The two launches of a pair meet the neighbour at different
    times, and a spell of it moves a launch of several processes further than the probe's one thread, on both clocks
    (its ranks spin in gloo while a peer waits for a core). Beside two busy processes on the 2-core VM, pairs in turn
    of one checkout under one interpreter read their fastest step -14.5..+16.2 % and their CPU clock -14.9..+12.4 %
    apart (docs/measurements.md); duet pairs, launched at once, meet the neighbour alike.

    ``reference`` and ``candidate``: each side's core_shortfall. Both sides must show the turns, beyond each metric's
    tolerance (a candidate whose own slowdown kept its probe off the cores does not excuse itself), and the smaller
    of the two is what explains a change: a rate or a CPU time worse by no more than it and the tolerance allow
    (``explained``). All or nothing: where one FAIL is beyond them, every FAIL stands."""
    settled = list(outcomes)
    if reference is None or candidate is None:
        return settled, []
    turns = max(reference, candidate)
    drop = Drop(turns, "probe_matmul_gflops")
    fails = [index for index, outcome in enumerate(settled) if outcome == "FAIL"]
    for index in fails:
        verdict = verdicts[index]
        if not (turns < -verdict.tolerance and covered(verdict, worsening(verdict.change, verdict.better),
                                                        drop_on(verdict.metric, drop, drop))):
            return settled, []
    rows = []
    for index in fails:
        settled[index] = "unresolved"
        verdict = verdicts[index]
        rows.append({"rule": "in turn", "metric": verdict.metric, "change": verdict.change, "turns_taken": turns,
                     "explained": explained(verdict, drop)})
    return settled, rows


def held_on_slower_cores(verdicts: Sequence[Any], raw: Sequence[str], worse: Sequence[float], cores: Drop | None
                         ) -> set[str]:
    """The CPU-clock metrics that FAILed against the baseline (``raw``) by no more than the probe's drop by CPU time
    explains (covered), whichever rule then settled them: the cores ran slower, the code did no more work that the
    CPU clock shows. ``worse``: how much worse each is than what it FAILed against (judge's)."""
    return {verdict.metric for verdict, outcome, by in zip(verdicts, raw, worse)
            if clock(verdict.metric) == "cpu" and outcome == "FAIL"
            and covered(verdict, by, drop_on(verdict.metric, None, cores))}


def awaits_cpu_clock(verdicts: Sequence[Any], turns: float | None) -> bool:
    """Whether a run more could decide a wall-clock FAIL beside a neighbour (beside_a_neighbour): every FAIL so far
    is a wall-clock rate or time the turns taken could explain, and a CPU-clock metric, its witness, is still
    inconclusive. A FAIL otherwise ends the case at once (gate.undecided)."""
    fails = [verdict for verdict in verdicts if verdict.outcome == "FAIL"]
    return (turns is not None and bool(fails)
            and all(clock(v.metric) == "wall" and moves_with_speed(v.metric) and turns < -v.tolerance for v in fails)
            and any(clock(v.metric) == "cpu" and v.outcome == "inconclusive" for v in verdicts))


def moves_with_speed(metric: str) -> bool:
    """Whether a slower machine, or less of it, moves the metric: a rate or a time, not memory, FLOPs per sample or
    a share."""
    return scaled_by_probe(metric) or metric == "mfu"


CPU_TIME_METRICS = frozenset({"cpu_seconds_per_sample", "least_step_cpu_seconds_per_sample", "host_cpu_per_step_s"})
"""The CPU clock's metrics that a slower core moves as it moves the probe's CPU time: not a count of instructions,
which a slower core retires as many of, nor a share of CPU time, which stays when every thread slows alike."""


WORK_COUNTS = frozenset({"instructions_per_sample"})
"""Counts of the work done, which more work moves and a faster or slower machine does not."""


def moved_on(metric: str) -> str | None:
    """The clock on which a slower or faster machine moves the metric: on the wall clock a rate or a time (not
    memory, FLOPs per sample or a share of the window), on the CPU clock a CPU time; None for any other."""
    if clock(metric) == "wall":
        return "wall" if moves_with_speed(metric) else None
    return "cpu" if metric in CPU_TIME_METRICS else None


def drop_on(metric: str, machine: Drop | None, cores: Drop | None) -> Drop | None:
    """The probe's drop on the metric's clock (``machine``: by the wall clock, ``cores``: by CPU time); None where a
    slower machine cannot explain the metric's (moved_on)."""
    return {"wall": machine, "cpu": cores, None: None}[moved_on(metric)]


def speed_up_on(metric: str, then: Mapping[str, Any], now: Mapping[str, Any], calibrated: bool = False
                ) -> float | None:
    """How much faster the probe's matmul read than at the baseline on the clock a faster machine moves the metric on
    (moved_on): 0 where it read slower, for a count of work (WORK_COUNTS), or where --perf-calibrate
    (``calibrated``) scaled the metric's values by it already; None where the probe was not read both times or the
    metric moves with neither (memory, FLOPs, a share). The matmul's, not the slower kernel's as for a drop: the copy
    reads the noisier. Beside a neighbour at the baseline's measuring and alone now, the wall clock's reading rose
    22-23 % and the CPU time's fell 6-8 % (docs/measurements.md): each clock's metrics hide their own's."""
    if metric in WORK_COUNTS or (calibrated and scaled_by_probe(metric)):
        return 0.0
    on = moved_on(metric)
    change = None if on is None else probe_change(then, now, MACHINE_PROBES[on][0])
    return None if change is None else max(0.0, change)


def covered(verdict: Any, worse: float, drop: Drop | None) -> bool:
    """Whether the probe's drop on the metric's clock explains the metric's worsening, within its tolerance."""
    return drop is not None and drop.change < 0 and worse <= explained(verdict, drop)


def explained(verdict: Any, drop: Drop, tolerance: float | None = None) -> float:
    """The worsening of the metric that the machine's drop and the metric's tolerance (or ``tolerance``) explain
    together, beyond which its reading FAILs on this machine now. A rate d slower makes a rate (higher is better) d
    worse and a time (lower is better) 1/(1+d) - 1 worse: a copy 15.4 % slower makes the CPU seconds per sample
    18.2 % more."""
    slower, tolerance = 1.0 + drop.change, verdict.tolerance if tolerance is None else tolerance
    if verdict.better == "higher":
        return 1.0 - (1.0 - tolerance) * slower
    return (1.0 + tolerance) / slower - 1.0


def clock(metric: str) -> str | None:
    info = METRICS.get(metric)
    return info.clock if info else None


def kernel(probe: str | None) -> str:
    """The probe's kernel a reading (``probe``, its name) was taken on."""
    return "copy (memory)" if "copy" in (probe or "") else "matmul (compute)"


def describe(row: Mapping[str, Any]) -> str:
    if row.get("rule") == "in turn":
        return (f"{row['metric']}: {row['change']:+.1%}, but the pairs ran one launch after the other while a "
                f"neighbour took turns on the cores (the machine-speed probe's thread got {-row['turns_taken']:.0%} "
                "less of a core): a pair's two launches met it at different times, which moves a launch of several "
                f"processes by as much; only a reading worse by more than {row['explained']:.1%} FAILs here")
    if row.get("rule") == "neighbour":
        return (f"{row['metric']}: {row['change']:+.1%}, but a neighbour took turns on the cores: the machine-speed "
                f"probe's thread got {-row['turns_taken']:.0%} less of them than at the baseline, and no CPU-clock "
                f"metric FAILed beyond the machine's own drop or how far its sessions stray ({row['cpu_clock']}): "
                "slower code moves the CPU clock "
                "too, and a workload of several processes beside a neighbour slows further than the probe's one "
                "thread")
    if row.get("rule") == "wall alone":
        probe = ("" if row["probe_change"] is None
                 else f"; the machine-speed probe's {kernel(row.get('probe'))} ran {row['probe_change']:+.1%}")
        return (f"{row['metric']}: {row['change']:+.1%}, but the CPU clock held ({row['cpu_clock_held']}; none "
                f"significantly worse beyond what slower cores explain){probe}: slower code on a CPU moves both "
                "clocks, a session given less of the cores the wall clock alone, and no history of this case's "
                "sessions here says how far its wall clock strays (--perf-history keeps them)")
    fails = (f"; against this baseline on this machine now, only a reading worse by more than {row['explained']:.1%} "
             "(its tolerance on top of the machine's drop) FAILs" if "explained" in row else "")
    if clock(row["metric"]) == "cpu":
        return (f"{row['metric']}: {row['change']:+.1%}, but the machine-speed probe's {kernel(row.get('probe'))} ran "
                f"{row['probe_change']:+.1%} per second of its CPU time against the baseline's: this machine's cores "
                f"or memory ran slower, which the code does not explain{fails}")
    return (f"{row['metric']}: {row['change']:+.1%}, but the machine-speed probe's {kernel(row.get('probe'))} ran "
            f"{row['probe_change']:+.1%} against the baseline's, and the CPU clock held or the probe's CPU time "
            f"explains it too: the machine ran slower, which the code does not explain{fails}")
