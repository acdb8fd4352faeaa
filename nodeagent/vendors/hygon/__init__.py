"""Hygon's node-agent package: bindings, detector, grants, partitions, simulator."""
