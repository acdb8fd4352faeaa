"""Iluvatar GPUs: the detector over IXML (the NVML-like family in `vendors/common/`), the
responder (HAMi-core slices) and the recorded simulator."""
