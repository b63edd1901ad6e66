"""A fake agent *client*: it speaks the real agent protocol over real HTTP to the app, without processes.

It keeps the jobs it was told to run, and the test decides when they exit. Every heartbeat is a real
`POST /api/v1/agent/heartbeat` validated against `nanum.protocol`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nanum.protocol import GpuInfo, Heartbeat, HeartbeatReply, JobLaunch, JobStatus, LogChunk, NodeInfo
from tests.server.asgiclient import AsgiClient


@dataclass
class FakeAgent:
    client: AsgiClient
    name: str
    token: str
    gpus: int = 4
    model: str = "A100"
    running: dict[int, JobLaunch] = field(default_factory=dict)
    exited: dict[int, JobStatus] = field(default_factory=dict)
    logs: list[LogChunk] = field(default_factory=list)
    last: HeartbeatReply | None = None
    #: When each job last touched its checkpoint mark (reported in every status, as the real agent does).
    checkpoints: dict[int, float] = field(default_factory=dict)

    def info(self) -> NodeInfo:
        gpus = [
            GpuInfo(index=i, uuid=f"GPU-{self.name}-{i}", model=self.model, memory_mb=81920) for i in range(self.gpus)
        ]
        return NodeInfo(
            name=self.name,
            hostname=f"{self.name}.lan",
            gpus=gpus,
            cpus=32,
            memory_mb=256_000,
            simulated=True,
            unix_user="nanum",
        )

    def heartbeat(self) -> Heartbeat:
        statuses = [
            JobStatus(
                job_id=j, state="running", pid=1000 + j, started_at=time.time(), checkpoint_at=self.checkpoints.get(j)
            )
            for j in self.running
        ]
        return Heartbeat(node=self.info(), jobs=statuses + list(self.exited.values()), logs=self.logs)

    def beat(self, wait_s: float = 0.0) -> HeartbeatReply:
        """One heartbeat; then act like a reconciler: start what is desired, stop what is not, forget acked."""
        body = self.heartbeat().model_copy(update={"wait_s": wait_s})
        r = self.client.post(
            "/api/v1/agent/heartbeat",
            content=body.model_dump_json(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
        reply = HeartbeatReply.model_validate(r.json())
        self.apply(reply)
        return reply

    def apply(self, reply: HeartbeatReply) -> None:
        self.last = reply
        self.logs = []
        for job_id in reply.ack:
            self.exited.pop(job_id, None)
        desired = {d.job_id: d for d in reply.desired}
        for job_id in list(self.running):
            if job_id not in desired:
                self.exit(job_id, code=143, signal=15)
        for job_id, launch in desired.items():
            if job_id not in self.running and job_id not in self.exited:
                self.running[job_id] = launch

    def exit(self, job_id: int, code: int = 0, signal: int | None = None, timed_out: bool = False) -> None:
        self.running.pop(job_id)
        self.exited[job_id] = JobStatus(
            job_id=job_id, state="exited", exit_code=code, signal=signal, timed_out=timed_out, ended_at=time.time()
        )

    def fail_to_start(self, job_id: int, reason: str) -> None:
        self.running.pop(job_id, None)
        self.exited[job_id] = JobStatus(job_id=job_id, state="failed_to_start", reason=reason)

    def held_gpus(self) -> dict[int, list[int]]:
        return {j: launch.gpus for j, launch in self.running.items()}
