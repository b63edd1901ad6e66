"""The control-plane server: the HTTP API under /api/v1, auth, the scheduler loop, and the agent endpoint.

`create_app(settings)` builds the FastAPI application; `nanum.server.runtime` starts it (with a local agent for
`nanum up`).
"""
