"""Services: the server's business operations. Each takes the server context (or a session) and plain values,
raises the typed errors of `nanum.server.errors`, and knows nothing of HTTP."""
