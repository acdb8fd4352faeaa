"""T-Head PPUs: the detector over HGML (the NVML-like family in `vendors/common/`), MIG
detection and the HGML partition driver, the responder and the recorded simulator in MIG mode."""
