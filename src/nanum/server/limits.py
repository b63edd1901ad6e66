"""What the API accepts: the bounds of every input, listed in docs/api.md ("Limits").

Plain numbers with no imports, so the CLI checks its options against the same bounds without loading the
server. The input models (`nanum.server.schemas` and `nanum.server.job_schemas`, on `nanum.server.inputs.ApiIn`)
use them field by field, and `nanum.server.guard` caps request bodies.
"""

from __future__ import annotations

#: Ids in paths are signed 64-bit integers (beyond: 422); the store's id columns hold up to MAX_STORED_ID
#: (32-bit on PostgreSQL), so a larger id is absent (404) without asking the store.
MAX_ID = 2**63 - 1
MAX_STORED_ID = 2**31 - 1
#: Request bodies: the user API, and agents' heartbeats (which carry up to 1 MiB of job output, JSON-escaped).
MAX_BODY = 1 << 20
MAX_AGENT_BODY = 16 << 20
#: What the notebook proxy passes on in one request (a notebook saved with its outputs, an uploaded file).
MAX_NOTEBOOK_BODY = 256 << 20
#: A job's request.
MAX_NAME = 128
MAX_ARGS = 1_000
MAX_COMMAND_BYTES = 64 << 10
MAX_ENV_VARS = 256
MAX_ENV_BYTES = 64 << 10
MAX_PATH = 4096
MAX_GPUS = 1024
MAX_NODES = 4096
MAX_CPUS = 100_000
MAX_MEMORY_MB = 64 << 20  # 64 TiB
MAX_TIME_LIMIT_S = 365 * 86400
#: Arrays and dependencies: tasks in one array, the largest task index, dependencies of one job, retries.
MAX_ARRAY_TASKS = 10_000
#: How many finished jobs a listing gives by default, and at most: the latest. A year of a university's jobs is
#: millions; listing 100,000 took a server 4.9 s and 458 MiB, and any user may ask.
FINISHED_SHOWN = 1_000
MAX_FINISHED_SHOWN = 100_000
MAX_ARRAY_INDEX = 1_000_000
MAX_DEPENDENCIES = 100
MAX_RETRIES = 100
#: Quotas and limits of labs and users.
MAX_QUOTA = 1_000_000
MAX_GPU_HOURS = 1e9
MAX_WEIGHT = 1e6
MAX_GRACE_S = 86400.0
#: Log offsets and other byte counts in queries.
MAX_OFFSET = 2**62
#: Free-form settings (idle policy changes): how many fields, how long a name, how large a number.
MAX_SETTINGS = 32
MAX_SETTING_VALUE = 1e12
