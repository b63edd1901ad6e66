"""Time one scheduling cycle at scale: 1,000 nodes × 8 GPUs of mixed models, 5,000 running and 10,000 pending jobs.

For every queue order with binpack and EASY backfill, prints the median milliseconds over several cycles.
Target: every order under 100 ms median on a 2-core machine.

    .venv/bin/python benchmarks/core_cycle.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from nanum.core import (
    ORDERS,
    Gpu,
    HistoryPredictor,
    Job,
    JobId,
    Lab,
    Limits,
    Node,
    Placement,
    Policy,
    Running,
    Snapshot,
    schedule,
)

MODELS = ("A100", "H100", "V100", "L40S")
SIZES = (1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 4, 8)


def build(seed: int = 7) -> tuple[Snapshot, HistoryPredictor]:
    rnd = random.Random(seed)
    nodes = tuple(
        Node(name=f"gpu-{i:04d}", gpus=tuple(Gpu(g, MODELS[i % 4], 81920, g // 4) for g in range(8)),
             cpus=128, memory_mb=1_048_576)
        for i in range(1000)
    )
    free = {n.name: list(range(8)) for n in nodes}
    labs = {f"lab{i}": Lab(name=f"lab{i}", guaranteed_gpus=400, limits=Limits(max_gpus=1200),
                           decayed_usage=rnd.uniform(0, 1e7)) for i in range(20)}
    now = 1_000_000.0
    running: list[Running] = []
    order = [n.name for n in nodes]
    rnd.shuffle(order)
    jid = 0
    for name in order * 8:
        if len(running) == 5000:
            break
        size = rnd.choice(SIZES)
        if len(free[name]) < size:
            continue
        jid += 1
        job = Job(id=JobId(jid), user=f"user{jid % 300}", lab=f"lab{jid % 20}", gpus=size, cpus=4 * size,
                  memory_mb=32768 * size, time_limit=rnd.choice([3600.0, 14400.0, 86400.0]), submit_time=now - 9e4)
        taken, free[name] = tuple(free[name][:size]), free[name][size:]
        start = now - rnd.uniform(0, job.time_limit or 3600.0)
        running.append(Running(job=job, placements=(Placement(name, taken),), start_time=start,
                               expected_end=start + (job.time_limit or 0), borrowing=rnd.random() < 0.2))
    pending = []
    for _ in range(10_000):
        jid += 1
        size = rnd.choice(SIZES)
        pending.append(Job(
            id=JobId(jid), user=f"user{jid % 300}", lab=f"lab{jid % 20}", gpus=size,
            nodes=2 if size == 8 and rnd.random() < 0.3 else 1,
            gpu_model=rnd.choice([None, None, *MODELS]), cpus=4 * size, memory_mb=32768 * size,
            time_limit=rnd.choice([None, 1800.0, 3600.0, 14400.0]), priority=rnd.randint(0, 100),
            submit_time=now - rnd.uniform(0, 86400), name=f"exp{jid % 50}",
            attained_gpu_seconds=rnd.choice([0.0, 0.0, 5000.0, 50000.0]),
        ))
    predictor = HistoryPredictor()
    for i in range(2000):
        j = pending[i]
        predictor.observe(j, rnd.uniform(60, 20000))
    snap = Snapshot(now=now, nodes=nodes, pending=tuple(pending), running=tuple(running), labs=labs)
    return snap, predictor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    snap, predictor = build()
    used = sum(r.gpus for r in snap.running)
    print(f"cluster: {len(snap.nodes)} nodes × 8 GPUs ({', '.join(MODELS)}); "
          f"{len(snap.running)} running on {used} GPUs; {len(snap.pending)} pending")
    print("median milliseconds per cycle: wall clock, and CPU time of this process (steady when the machine is busy)")
    print(f"{'policy':<28}{'wall ms':>9}{'cpu ms':>9}{'starts':>8}{'preempt':>9}{'target':>9}")
    for order in ORDERS:
        policy = Policy(order=order, placement="binpack", backfill="easy")
        wall, cpu = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            decisions = schedule(snap, policy, predictor)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        med_wall, med_cpu = statistics.median(wall), statistics.median(cpu)
        ok = "ok" if med_cpu < 100 else "SLOW"
        print(f"{policy.label:<28}{med_wall:>9.1f}{med_cpu:>9.1f}{len(decisions.starts):>8}"
              f"{len(decisions.preemptions):>9}{ok:>9}")


if __name__ == "__main__":
    main()
