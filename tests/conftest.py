"""Shared test wiring: the testbed fixture and its failure reporting live in testbed/."""

pytest_plugins = ["testbed.pytest_plugin"]
