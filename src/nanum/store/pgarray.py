"""`PgArray`: a list that psycopg sends to PostgreSQL as one array in its binary format.

The statements that write many rows at once from arrays (`unnest`, e.g. a second's GPU readings of a hundred
nodes) pass their columns as lists. psycopg sends a plain list in the text format, formatting each element and
checking it against a regular expression for the quotes it would need: for the readings of 200 nodes × 8 GPUs
that was a quarter of the server's CPU in writing them. In the binary format each element is packed as it is.
The elements of one array must be of one Python type (an `int` among `float`s is refused): callers convert.
"""

from __future__ import annotations

import psycopg
from psycopg.types.array import ListBinaryDumper


class PgArray(list):  # type: ignore[type-arg]
    """A list sent to PostgreSQL in binary (see the module docstring)."""


psycopg.adapters.register_dumper(PgArray, ListBinaryDumper)
