"""Shared test wiring: the testbed fixture and its failure reporting live in testbed/.

Hypothesis runs under one profile everywhere: no per-example deadline and no "generation is
slow" health check. Both are clocks, and a clock is not a test on a shared 2-core machine whose
load average reaches 10 while testbeds run beside the unit tier (a sums property test failed its
health check at 1.06 s for ten inputs so). What a property claims is checked on every example
regardless; how fast is measured by the benchmarks."""

from hypothesis import HealthCheck, settings

settings.register_profile("chain", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("chain")

pytest_plugins = ["testbed.pytest_plugin"]
