"""Fuzzing the whole published API (schemathesis): no request may get a server error, and every response must
match the schema the API publishes. About 900 cases on each database; `benchmarks/fuzz.py` runs many more."""

from __future__ import annotations

import pytest

from nanum.server.context import ServerContext
from tests.server.fuzzing import Fuzzer, Tally, prepare

#: Cases per operation (29 operations), and stateful scenarios of up to STEPS linked calls.
EXAMPLES, SCENARIOS, STEPS = 25, 25, 12


@pytest.mark.timeout(300)
def test_no_request_gets_a_server_error_or_a_response_outside_the_schema(ctx: ServerContext) -> None:
    tally = Tally()
    fuzzer = Fuzzer(ctx, prepare(ctx), tally)
    try:
        fuzzer.run_operations(EXAMPLES)
        fuzzer.run_stateful(SCENARIOS, STEPS)
    finally:
        fuzzer.close()
    assert tally.cases >= 29 * EXAMPLES
    assert tally.by_class().get("2xx", 0) >= tally.cases // 10, tally.report()  # not all refused at the door
    assert not tally.server_errors(), tally.report()
    assert not tally.nonconforming(), tally.report()
    assert not tally.background, tally.report()
