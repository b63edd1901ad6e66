"""HTTP routes under /api/v1, one module per resource. Routes are thin: parse, authorise, call a service."""
