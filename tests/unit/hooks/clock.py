"""The hooks' clock, stopped for tests that compare whole answers (`hooks.transport.now`)."""

NOW = "2026-12-03T08:00:00Z"
"""What `hooks.transport.now` answers under the hook tests: the transition time of a condition an
answer flips. A condition the request already holds with the same status keeps its own time."""

EARLIER = "2026-12-01T07:00:00Z"
"""A transition time a request's parent already holds."""
