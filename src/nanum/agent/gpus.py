"""GPU discovery for the agent: real GPUs through NVML, or simulated ones from a `--simulate-gpus` spec.

A spec is `N` (N GPUs of model "SIM") or `NxMODEL` (`4xA100`, `8xH100`), optionally with the memory per GPU
(`2xA100:40G`). Simulated GPUs get indices 0..N-1 and UUIDs derived from the node name, so they stay the same
across restarts. With NVML, GPUs joined by NVLink (directly or through NVSwitch) share an `island` number;
without NVLink every GPU is in island 0.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from typing import Any

from nanum.protocol import GpuInfo

__all__ = ["SpecError", "discover", "discover_nvml", "parse_spec", "simulated_gpus"]

log = logging.getLogger("nanum.agent")

SIM_MODEL = "SIM"
DEFAULT_SIMULATED = 4
MAX_SIMULATED = 256

# Memory (MiB) that NVML reports for common models; unknown models get 24 GiB.
MODEL_MEMORY_MB = {
    "SIM": 16384,
    "T4": 15360,
    "V100": 32768,
    "A10": 23028,
    "A30": 24576,
    "A40": 46068,
    "A100": 81920,
    "A6000": 49140,
    "L4": 23034,
    "L40": 46068,
    "L40S": 46068,
    "RTX3090": 24576,
    "RTX4090": 24564,
    "H100": 81559,
    "H200": 143771,
    "GH200": 97871,
    "B200": 183359,
}
DEFAULT_MEMORY_MB = 24576

_SPEC = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*(?::\s*(\d+)\s*([GgMm])i?[Bb]?)?)?\s*$")
_SIM_NAMESPACE = uuid.UUID("6b1c3f4e-2d2a-4f59-9a51-6e616e756d00")


class SpecError(ValueError):
    """A `--simulate-gpus` spec that does not parse; the message says what is accepted."""


def parse_spec(spec: str) -> tuple[int, str, int]:
    """Return (count, model, memory_mb) for `N`, `NxMODEL` or `NxMODEL:MEMG`."""
    match = _SPEC.match(spec)
    if not match:
        raise SpecError(f"invalid GPU spec {spec!r}: use N or NxMODEL, for example 4, 4xA100 or 8xH100")
    count = int(match.group(1))
    if count > MAX_SIMULATED:
        raise SpecError(f"invalid GPU spec {spec!r}: at most {MAX_SIMULATED} simulated GPUs per node")
    model = match.group(2) or SIM_MODEL
    memory = MODEL_MEMORY_MB.get(model.upper().replace("-", ""), DEFAULT_MEMORY_MB)
    if match.group(3):
        unit = 1024 if match.group(4).lower() == "g" else 1
        memory = int(match.group(3)) * unit
    return count, model, memory


def simulated_gpus(spec: str, node_name: str) -> list[GpuInfo]:
    """The GPUs a simulated node reports: distinct indices, stable fake UUIDs, the model's usual memory."""
    count, model, memory = parse_spec(spec)
    return [
        GpuInfo(
            index=i,
            uuid=f"GPU-{uuid.uuid5(_SIM_NAMESPACE, f'{node_name}/{i}')}",
            model=model,
            memory_mb=memory,
            island=0,
        )
        for i in range(count)
    ]


def discover(simulate: str | None, node_name: str) -> tuple[list[GpuInfo], bool]:
    """The node's GPUs and whether they are simulated.

    With a spec, simulate it. Otherwise ask NVML; when NVML is missing or sees no GPU, say so once and
    simulate the default number of GPUs so the node is still usable for trying nanum out.
    """
    if simulate is not None:
        return simulated_gpus(simulate, node_name), True
    gpus = discover_nvml()
    if gpus:
        return gpus, False
    log.warning("no NVIDIA GPU found; simulating %d GPUs", DEFAULT_SIMULATED)
    return simulated_gpus(str(DEFAULT_SIMULATED), node_name), True


def discover_nvml() -> list[GpuInfo]:
    """The GPUs NVML sees, in NVML's index order (PCI bus order); [] when there is no driver or no GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        islands = _nvlink_islands(pynvml, handles)
        return [_gpu_info(pynvml, i, h, islands[i]) for i, h in enumerate(handles)]
    except pynvml.NVMLError as exc:
        log.warning("NVML failed while listing GPUs: %s", exc)
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _gpu_info(nvml: Any, index: int, handle: Any, island: int) -> GpuInfo:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    name = _text(nvml.nvmlDeviceGetName(handle)).removeprefix("NVIDIA ").strip()
    return GpuInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=name,
        memory_mb=int(memory.total) // (1024 * 1024),
        island=island,
    )


def _nvlink_islands(nvml: Any, handles: list[Any]) -> list[int]:
    """Island number per GPU: connected components of the NVLink peer graph (0 for all when no NVLink)."""
    parent = list(range(len(handles)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    linked = False
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            if _nvlink_peers(nvml, handles[i], handles[j]):
                parent[find(j)] = find(i)
                linked = True
    if not linked:
        return [0] * len(handles)
    roots: dict[int, int] = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(len(handles))]


def _nvlink_peers(nvml: Any, a: Any, b: Any) -> bool:
    """Whether GPUs `a` and `b` talk over NVLink: NVML's P2P status, else a's active links that end at b."""
    try:
        return bool(nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK) == nvml.NVML_P2P_STATUS_OK)
    except nvml.NVMLError:
        pass
    try:
        target = _text(nvml.nvmlDeviceGetPciInfo(b).busId).lower()
    except nvml.NVMLError:
        return False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(a, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            if _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(a, link).busId).lower() == target:
                return True
        except nvml.NVMLError:
            continue
    return False
