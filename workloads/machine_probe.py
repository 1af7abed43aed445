"""A machine-speed probe: how fast is this machine right now, independent of the workload's code?

Shared machines drift (other tenants, clocks, memory reclaim): a stored baseline cannot tell a slower
build from a slower hour. Every rank times two fixed kernels at the same moment, right before the
measured window and right after it: a matrix multiply (compute) and a large copy (memory bandwidth).
The verdict's model weighs the session's speed by these readings (docs/gate.md). The kernels never
change with the workload, so a regression in the workload's own code does not move the probe: they run on one
intra-op thread whatever the workload set (a CPU matmul's rate follows its thread count, and a change that cut the
workload's threads would otherwise slow the probe and the steps alike, and pass for a slower machine).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

CHUNKS = 9
"""Timed chunks per kernel; the median chunk's rate is the probe's reading (robust to a stray pause)."""
SIZES = {"cpu": (256, 64 << 20), "cuda": (8192, 256 << 20)}
"""Per device type: the square matmul's side and the copied tensor's size in bytes."""


def _timed(fn, device: torch.device) -> tuple[float, float]:
    """``fn``'s wall time and this thread's CPU time over it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started, cpu_started = time.perf_counter(), time.thread_time()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started, time.thread_time() - cpu_started


def _median_rates(work: float, fn, device: torch.device, repeats: int) -> tuple[float, float]:
    """Rates (work units per second) of the median chunk by the wall clock and by the thread's CPU time; each chunk
    runs ``fn`` ``repeats`` times."""
    def chunk() -> None:
        for _ in range(repeats):
            fn()

    chunk()
    times = [_timed(chunk, device) for _ in range(CHUNKS)]
    return (statistics.median(work * repeats / wall for wall, _ in times),
            statistics.median(work * repeats / max(cpu, 1e-9) for _, cpu in times))


def read_probe(device: torch.device, matmul_repeats: int = 16, copy_repeats: int = 2) -> dict[str, float]:
    """This rank's reading: matmul GFLOP/s (fp32, TF32 off) and copy GB/s (bytes read + written), on one thread;
    the workload's thread count is restored after. On a CPU also each kernel's rate per second of the thread's CPU
    time: a neighbour that takes turns on the cores slows the wall-clock rates only, a slower core (its clocks) or
    memory (shared with other tenants of the host) both, as it does the CPU clock's metrics. The two kernels drift
    apart: on the 2-core VM the copy read 15-35 % slower a day after a baseline while the matmul read 2-17 %."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _read(device, matmul_repeats, copy_repeats)
    finally:
        torch.set_num_threads(threads)


def _read(device: torch.device, matmul_repeats: int, copy_repeats: int) -> dict[str, float]:
    side, nbytes = SIZES["cuda" if device.type == "cuda" else "cpu"]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(side, side, device=device, generator=generator)
    b = torch.randn(side, side, device=device, generator=generator)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        gflops, cpu_gflops = _median_rates(2 * side ** 3 / 1e9, lambda: torch.mm(a, b), device, matmul_repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    gbps, cpu_gbps = _median_rates(2 * nbytes / 1e9, lambda: dst.copy_(src), device, copy_repeats)
    reading = {"matmul_gflops": gflops, "copy_gbps": gbps}
    if device.type != "cuda":
        reading.update(matmul_cpu_gflops=cpu_gflops, copy_cpu_gbps=cpu_gbps)
    return reading


def probe_all_ranks(device: torch.device) -> dict[str, list[float]]:
    """Every rank probes at once (as they train at once); returns each kernel's reading per rank.

    Data-parallel steps go at the pace of the slowest rank, so the plugin reads the slowest.
    """
    dist.barrier()
    reading = read_probe(device)
    mine = torch.tensor(list(reading.values()), dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    per_rank = torch.stack(everyone).T.tolist()
    return dict(zip(reading, per_rank))
