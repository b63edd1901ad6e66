"""A fake agent that also reports readings: the test says what each GPU shows, the heartbeat carries it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nanum.protocol import GpuProcess, GpuSample, Heartbeat, HeartbeatReply, JobSample, Sample
from tests.server.fakeagent import FakeAgent


@dataclass
class MonitoredAgent(FakeAgent):
    samples: list[Sample] = field(default_factory=list)
    #: GPU index → pid of a process outside nanum on it.
    strangers: dict[int, int] = field(default_factory=dict)

    def read(
        self,
        t: float | None = None,
        *,
        util: float | dict[int, float] = 90.0,
        memory_mb: int = 30000,
        cpu: float = 5.0,
        activity: float | None = None,
    ) -> Sample:
        """Queue one reading at `t`: jobs' GPUs at `util` (per GPU index, or all), free GPUs at 0."""
        t = time.time() if t is None else t
        held = {g: j for j, launch in self.running.items() for g in launch.gpus}
        gpus = []
        for i in range(self.gpus):
            job = held.get(i)
            value = (util.get(i, 0.0) if isinstance(util, dict) else util) if job is not None else 0.0
            procs = [GpuProcess(pid=1000 + job, memory_mb=memory_mb, job_id=job)] if job is not None else []
            if i in self.strangers:
                procs.append(GpuProcess(pid=self.strangers[i], memory_mb=2048, user="mallory", command="python hog.py"))
            gpus.append(GpuSample(index=i, util=value, memory_mb=memory_mb if job is not None else 0, power_w=200.0,
                                  temperature_c=50.0, processes=procs))  # fmt: skip
        jobs = [JobSample(job_id=j, cpu_percent=cpu, last_activity=activity) for j in self.running]
        sample = Sample(time=t, gpus=gpus, jobs=jobs)
        self.samples.append(sample)
        return sample

    def heartbeat(self) -> Heartbeat:
        beat = super().heartbeat()
        beat.samples, self.samples = self.samples, []
        return beat

    def beat(self, wait_s: float = 0.0) -> HeartbeatReply:
        """One heartbeat, then the server's write of the readings it brought (which its writer makes within about a
        second: `nanum.server.monitoring.FLUSH_S`)."""
        reply = super().beat(wait_s)
        self.client.app.state.monitoring.flush()
        return reply
