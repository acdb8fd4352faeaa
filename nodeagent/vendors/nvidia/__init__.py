"""NVIDIA GPUs: the detector over NVML (the binding in `vendors/common/`, shared with the
MIG partitioner), the responder (HAMi-core slices, CDI or variable) and the NVML profile
simulator."""
