"""Accelerator detection: one detector per manufacturer behind one contract (`base.Detector`),
the PCI pre-check and held results (`held`), the detect loop (`loop`), NVIDIA over NVML
(`nvidia`, `nvidia_mig`, `nvml`), and the manufacturers the agent can detect (`registry`)."""
