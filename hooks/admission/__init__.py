"""Admission of accelerator workloads: the Pod webhook (fold, defaults, request rules, shared
card-count pin), the Workload fit-pin webhook and the per-card verdict hook."""
