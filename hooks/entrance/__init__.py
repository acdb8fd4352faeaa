"""Namespaces to queues: one LocalQueue per chain ClusterQueue in every non-system namespace."""
