"""The agent protocol: what an agent tells the server in a heartbeat and what the server answers.

Agents are level-triggered reconcilers. Each heartbeat carries the node's inventory, the state of every job the
agent holds (running, or exited and not yet acknowledged) and new log output. The reply carries the full list of
jobs that should be running on the node: the agent starts those it does not run, stops (SIGTERM, grace, SIGKILL)
those it runs that are not listed, and forgets exited jobs once the server acknowledges them. The server may hold
the reply up to `wait_s` seconds while it has nothing new to say, so starts and stops are prompt without busy
polling. A reply renews the agent's lease (`lease_s`, counted from when its heartbeat was sent); an agent whose
lease runs out stops its jobs, since the server requeues a silent node's jobs once the lease and their grace
have surely passed. Endpoint: `POST /api/v1/agent/heartbeat`, authenticated with the node token.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

#: Integers a heartbeat carries into the store (ids, GPU indices, pids, exit codes, MiB) fit its 32-bit integer
#: columns; byte counts of logs stay within 2**62. A heartbeat with one out of range is refused (422), not a 500.
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Count32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
ByteCount = Annotated[int, Field(ge=0, le=2**62)]


class Report(BaseModel):
    """The base of what an agent reports: numbers are finite (NaN or Infinity is refused, 422)."""

    model_config = ConfigDict(allow_inf_nan=False)


class GpuInfo(Report):
    index: Count32
    uuid: str
    model: str
    memory_mb: Count32
    island: Int32 = 0


class NodeInfo(Report):
    name: str
    hostname: str
    gpus: list[GpuInfo]
    cpus: int
    memory_mb: int
    simulated: bool = False
    unix_user: str = Field(description="the account the agent runs as")
    is_root: bool = False
    version: str = ""
    limits: str = Field(
        default="",
        description="how the node holds jobs to their CPUs and memory: `cgroup v2`, `cgroup v1`, or "
        "`not enforced (why)`; empty from agents that do not say",
    )
    runtimes: list[str] = Field(
        default=[], description="container runtimes the agent found and may use (`podman`, `docker`)"
    )
    paths: list[str] = Field(
        default=[], description="the paths of the server's `check_paths` that exist on this node (environments, "
        "datasets)",
    )


class JobStatus(Report):
    """One job the agent holds. `reason` explains a failure to start or an abnormal end in words."""

    job_id: Count32
    state: Literal["running", "exited", "failed_to_start"]
    pid: Count32 | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: Int32 | None = None
    signal: Int32 | None = None
    timed_out: bool = False
    reason: str | None = None
    log_size: ByteCount | None = Field(default=None, description="bytes in the job's log when this was sent")
    checkpoint_at: float | None = Field(
        default=None, description="when the job last saved its state: mtime of $NANUM_CHECKPOINT_DIR/.checkpoint"
    )
    fenced: bool = Field(
        default=False,
        description="stopped on its node because the agent heard nothing from the server for longer than the lease",
    )
    node_fault: bool = Field(
        default=False,
        description="it could not start because of its node (a full disk, no processes or memory left), not of what "
        "it asked for: the server runs it elsewhere and drains the node",
    )
    stopped: bool | None = Field(
        default=None,
        description="whether the agent had sent the job SIGTERM (a stop, its time limit) before it ended; "
        "None from agents that do not say",
    )
    run: Count32 | None = Field(
        default=None,
        description="the run of the job this status is about (its launch's `run`); None from agents that do not say",
    )
    address: str | None = Field(
        default=None, max_length=255, description="a notebook: `HOST:PORT` where its JupyterLab listens"
    )


class LogChunk(Report):
    """Output of a job from byte `offset` of its log (stdout and stderr together), decoded as UTF-8."""

    job_id: Count32
    offset: ByteCount
    data: str
    nbytes: ByteCount | None = Field(
        default=None, description="log bytes this chunk covers (`data` differs where bytes were not UTF-8)"
    )


class GpuProcess(Report):
    """A process using a GPU. `job_id` None: no nanum job owns it (someone bypassing the queue)."""

    pid: Count32
    memory_mb: Count32 = 0
    job_id: Count32 | None = None
    user: str | None = None
    command: str | None = None


class GpuSample(Report):
    """One reading of one GPU: utilisation (percent), memory in use (MiB), power (W) and temperature (°C)."""

    index: Count32
    util: float = Field(ge=0, le=100)
    memory_mb: Count32 = 0
    power_w: float | None = None
    temperature_c: float | None = None
    processes: list[GpuProcess] = []


class JobSample(Report):
    """What a job's processes did since the previous reading: CPU (percent of one core, summed over its
    processes) and, for notebooks where known, when its kernel was last active (epoch seconds)."""

    job_id: Count32
    cpu_percent: float = Field(default=0.0, ge=0)
    last_activity: float | None = None


class Sample(Report):
    """Every GPU of the node and every running job, read at one instant `time` (epoch seconds)."""

    time: float
    gpus: list[GpuSample] = []
    jobs: list[JobSample] = []


def _without_nul(data: Any) -> Any:
    """`data` with every NUL byte in its strings (keys too) replaced by U+FFFD."""
    if isinstance(data, str):
        return data.replace("\0", "\ufffd") if "\0" in data else data
    if isinstance(data, dict):
        return {_without_nul(k): _without_nul(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_without_nul(v) for v in data]
    return data


class GpuProblem(Report):
    """A GPU health problem the agent saw: an Xid error, uncorrectable ECC errors, retired pages waiting for a
    reset. `problem` is the evidence in words ("Xid 79 (fallen off the bus)"). The server takes the GPU out of
    service until an admin resumes the node; the agent reports a problem for as long as it lasts."""

    index: Count32
    problem: str = Field(max_length=500)


class Heartbeat(Report):
    """What an agent reports. Read from its JSON by `from_json`, where a NUL byte in any string (a job's log, a
    process's command) becomes U+FFFD: the store cannot hold NUL (PostgreSQL refuses it in text), and refusing the
    heartbeat would cut the node off for one job's output. Numbers are finite."""

    node: NodeInfo
    jobs: list[JobStatus] = []
    logs: list[LogChunk] = []
    samples: list[Sample] = Field(default=[], description="readings taken since the last heartbeat, oldest first")
    wait_s: float = Field(default=0.0, ge=0, le=30, description="hold the reply this long if nothing changes")
    gpu_problems: list[GpuProblem] = Field(default=[], description="GPU health problems (Xid, ECC, retired pages)")

    @classmethod
    def from_json(cls, text: bytes) -> Heartbeat:
        """A heartbeat from its JSON text; `pydantic.ValidationError` if it is not one.

        JSON carries a NUL only as the escape `\\u0000`: text without it (nearly every heartbeat) is read by
        pydantic in one pass over the bytes, about twice as fast as building Python objects first, which the
        others need so that their NULs can be replaced."""
        if b"\\u0000" in text:
            with contextlib.suppress(ValueError):  # not JSON: `model_validate_json` says why
                return cls.model_validate(_without_nul(pydantic_core.from_json(text)))
        return cls.model_validate_json(text)


class EnvironmentSpec(BaseModel):
    """What a job runs in: a container `image` (run by `runtime`, or whichever the node has), or a Python
    environment (`python`: a venv or conda prefix whose bin/ goes first on PATH); `setup`: a shell line run in
    the job's shell before its command."""

    image: str | None = None
    runtime: Literal["podman", "docker"] | None = None
    python: str | None = None
    setup: str | None = None


class JobLaunch(BaseModel):
    """Everything the agent needs to run one job (one node's part of it, for a gang)."""

    job_id: int
    name: str
    command: list[str]
    workdir: str
    env: dict[str, str] = {}
    gpus: list[int]
    unix_user: str
    time_limit_s: float | None = None
    cpus: int = Field(default=0, ge=0, description="CPU cores it may use on average (a CPU quota); 0: no limit")
    memory_mb: int | None = Field(default=None, ge=0, description="memory (RAM and swap) it may use; None: no limit")
    checkpoint_dir: str
    grace_s: float = 60.0
    max_output_bytes: ByteCount | None = Field(
        default=None, description="the most of its output (stdout and stderr) kept and sent: a job that writes more "
        "is stopped; None: no limit")
    run: Count32 = Field(default=0, description="which run of the job this is (1 for its first); echoed in its status")
    environment: str | None = Field(default=None, description="the name of the environment it runs in")
    environment_spec: EnvironmentSpec | None = None
    datasets: dict[str, str] = Field(default={}, description="the datasets it reads: name -> path on the node")
    kind: str = Field(default="batch", description="`notebook`: the agent runs JupyterLab; `shell`: a terminal relay")
    secret: str = Field(default="", description="a notebook's Jupyter token, or what a shell's relay shows the server")
    # Gang (multi-node) jobs: torchrun-style rendezvous.
    master_addr: str | None = None
    master_port: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    nproc_per_node: int = 1


class HeartbeatReply(BaseModel):
    desired: list[JobLaunch] = []
    ack: list[int] = Field(default=[], description="exited jobs the server has recorded; the agent may forget them")
    log_offsets: dict[int, int] = Field(default={}, description="bytes of each job's log the server already has")
    grace_s: float = 60.0
    allow_root: bool = False
    interval_s: float = 2.0
    check_paths: list[str] | None = Field(
        default=None, description="paths (Python environments, datasets) the agent should look for and report in "
        "`NodeInfo.paths`; None: the same as before",
    )
    lease_s: float = Field(
        default=30.0,
        gt=0,
        description="an agent with no reply to a heartbeat sent this long ago stops its jobs: by then the server "
        "may have requeued them",
    )
