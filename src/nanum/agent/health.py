"""GPU health through NVML: Xid errors, uncorrectable ECC errors and retired pages, as evidence in words.

Each heartbeat carries the problems seen so far (`GpuProblem`); the server takes those GPUs out of service until
an admin resumes the node. Xid errors arrive as NVML events (`nvmlEventTypeXidCriticalError`), read without
waiting; once seen, an Xid stays reported for as long as the agent runs, since the event does not come again.
Xids that a job's own bug causes (13: graphics engine exception, 31: memory page fault, 43: GPU stopped
processing, 45: preemptive cleanup) say nothing about the hardware and are ignored. Uncorrectable ECC errors
(volatile count above zero) and retired pages waiting for a reset are read every check. Simulated GPUs have no
health checks.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from nanum.protocol import GpuProblem

__all__ = ["APPLICATION_XIDS", "NvmlHealth", "make_health"]

log = logging.getLogger("nanum.agent")

#: Xid errors a job's own code causes: not a sign of bad hardware.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
#: What some Xids mean, for the evidence.
XID_MEANING = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class NvmlHealth:
    """Health checks of the node's GPUs. `nvml` is the pynvml module (tests pass a stand-in)."""

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.xids: dict[int, str] = {}
        self.events = self._register()

    def check(self) -> list[GpuProblem]:
        """Every GPU's problems, one line of evidence each (empty when all are healthy)."""
        self._read_xids()
        found: dict[int, list[str]] = {i: [x] for i, x in self.xids.items()}
        for index, handle in enumerate(self.handles):
            found.setdefault(index, []).extend(self._counters(handle))
        return [GpuProblem(index=i, problem="; ".join(p)) for i, p in sorted(found.items()) if p]

    def close(self) -> None:
        nvml = self.nvml
        if self.events is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self.events)
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()

    def _register(self) -> Any:
        """An event set with every GPU's critical Xid events, or None where NVML cannot give one."""
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("GPU health: no Xid events (%s); ECC and retired pages are still checked", exc)
            return None
        for index, handle in enumerate(self.handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            except nvml.NVMLError as exc:
                log.warning("GPU health: GPU %d gives no Xid events (%s)", index, exc)
        return events

    def _read_xids(self) -> None:
        nvml = self.nvml
        if self.events is None:
            return
        while True:
            try:
                data = nvml.nvmlEventSetWait(self.events, 0)
            except nvml.NVMLError:
                return  # a timeout: no event waiting
            xid = int(data.eventData)
            if xid in APPLICATION_XIDS:
                continue
            index = self._index(data.device)
            meaning = XID_MEANING.get(xid)
            self.xids[index] = f"Xid {xid}" + (f" ({meaning})" if meaning else "")

    def _index(self, device: Any) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetIndex(device))
        except self.nvml.NVMLError:
            return self.handles.index(device) if device in self.handles else 0

    def _counters(self, handle: Any) -> list[str]:
        nvml = self.nvml
        out = []
        try:
            ecc = int(nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))
            if ecc > 0:
                out.append(f"{ecc} uncorrectable ECC error{'s' if ecc != 1 else ''}")
        except nvml.NVMLError:
            pass  # no ECC on this GPU
        try:
            if nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED:
                out.append("retired pages waiting for a GPU reset")
        except nvml.NVMLError:
            pass
        return out


def make_health(simulated: bool) -> NvmlHealth | None:
    """NVML health checks for real GPUs; None for simulated ones or where NVML does not start."""
    if simulated:
        return None
    try:
        return NvmlHealth()
    except Exception as exc:  # no driver, no library: the node runs without health checks
        log.warning("GPU health checks are off: %s", exc)
        return None
