"""nanum's trace-driven simulator: replay real GPU-cluster traces through the same core the server runs.

`import_trace` turns raw public traces into the normalised trace; `simulate` replays one on a cluster spec under a
policy; `write_run` writes jobs.csv, allocations.csv, summary.json and plots; `check_run` proves a run's allocations
are sound.
"""

from nanum.sim.cluster import ClusterError, ClusterSpec, parse_cluster
from nanum.sim.engine import SimError, SimOptions, SimResult, Simulation, simulate
from nanum.sim.importers import FORMATS, Filter, import_trace
from nanum.sim.rows import ImportOptions
from nanum.sim.traces import ImportReport, TraceError, TraceJob, read_trace, write_trace

__all__ = [
    "FORMATS",
    "ClusterError",
    "ClusterSpec",
    "Filter",
    "ImportOptions",
    "ImportReport",
    "SimError",
    "SimOptions",
    "SimResult",
    "Simulation",
    "TraceError",
    "TraceJob",
    "import_trace",
    "parse_cluster",
    "read_trace",
    "simulate",
    "write_trace",
]
