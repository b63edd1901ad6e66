"""GPU health through a stand-in for the pynvml module: Xid events, uncorrectable ECC errors and retired pages
become evidence in words; Xids a job's own code causes do not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nanum.agent.health import NvmlHealth, make_health
from tests.agent.conftest import make_launch
from tests.agent.fakeserver import FakeServer


class FakeNvml:
    """The pynvml calls the health checks make, over three GPUs; tests push events and set counters."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_FEATURE_ENABLED = 1
    nvmlEventTypeXidCriticalError = 8

    class NVMLError(Exception):
        pass

    def __init__(self, events: bool = True) -> None:
        self.events: list[Any] = []
        self.ecc = [0, 0, 0]
        self.pending = [0, 0, 0]
        self.registered: list[int] = []
        self.can_events = events
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return int(handle[3:])

    def nvmlEventSetCreate(self) -> str:
        if not self.can_events:
            raise self.NVMLError("Not Supported")
        return "set"

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None:
        self.registered.append(self.nvmlDeviceGetIndex(handle))

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> Any:
        if not self.events:
            raise self.NVMLError("Timeout")
        return self.events.pop(0)

    def xid(self, index: int, xid: int) -> None:
        self.events.append(SimpleNamespace(device=f"gpu{index}", eventType=8, eventData=xid))

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        if handle == "gpu2":
            raise self.NVMLError("Not Supported")  # a GPU without ECC
        return self.ecc[self.nvmlDeviceGetIndex(handle)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: str) -> int:
        return self.pending[self.nvmlDeviceGetIndex(handle)]


def _said(health: NvmlHealth) -> dict[int, str]:
    return {p.index: p.problem for p in health.check()}


def test_healthy_gpus_report_nothing_and_every_gpu_gives_xid_events() -> None:
    nvml = FakeNvml()
    health = NvmlHealth(nvml)
    assert _said(health) == {} and nvml.registered == [0, 1, 2]


def test_xid_ecc_and_retired_pages_are_reported_with_the_evidence() -> None:
    nvml = FakeNvml()
    health = NvmlHealth(nvml)
    nvml.xid(1, 79)
    nvml.xid(2, 13)  # a job's own fault: not the hardware
    nvml.ecc[0] = 3
    nvml.pending[1] = 1
    assert _said(health) == {
        0: "3 uncorrectable ECC errors",
        1: "Xid 79 (fallen off the bus); retired pages waiting for a GPU reset",
    }
    nvml.pending[1] = 0
    assert _said(health) == {0: "3 uncorrectable ECC errors", 1: "Xid 79 (fallen off the bus)"}  # an Xid stays


def test_without_event_support_the_counters_are_still_read() -> None:
    nvml = FakeNvml(events=False)
    health = NvmlHealth(nvml)
    nvml.ecc[1] = 1
    assert _said(health) == {1: "1 uncorrectable ECC error"}
    health.close()
    assert nvml.shut


def test_simulated_gpus_have_no_health_checks() -> None:
    assert make_health(simulated=True) is None


def test_the_agents_heartbeats_carry_the_problems_it_sees(tmp_path: Path) -> None:
    from tests.agent.test_agent_loop import make_agent, running

    server = FakeServer()
    try:
        agent = make_agent(server.url, tmp_path / "state")
        nvml = FakeNvml()
        agent.health = NvmlHealth(nvml)  # the node's NVML, with a GPU about to fail
        with running(agent):
            server.wait_until(lambda: len(server.beats) >= 1)
            assert server.beats[-1].gpu_problems == []
            nvml.xid(2, 48)
            server.submit(make_launch(1, "true"))  # news: the agent beats again at once
            server.wait_until(lambda: any(b.gpu_problems for b in server.beats))
        seen = next(b.gpu_problems for b in server.beats if b.gpu_problems)
        assert [(p.index, p.problem) for p in seen] == [(2, "Xid 48 (double-bit ECC error)")]
    finally:
        server.close()
