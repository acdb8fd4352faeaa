"""Accelerator detection: one detector per manufacturer behind one contract (`base.Detector`),
the PCI pre-check and held results (`held`), the detect loop (`loop`) and the manufacturers the
agent can detect (`registry`).

Per manufacturer, the detector and the narrow binding in front of the vendor's own interface:
NVIDIA `nvidia`/`nvidia_mig` over NVML (`nvml`), AMD `amd` over AMD SMI (`amdsmi`), Ascend
`ascend` over DCMI (`dcmi`), Hygon `hygon` over ROCm SMI (`rsmi`), Cambricon `cambricon` over
CNDev (`cndev`), Iluvatar `iluvatar` and T-Head `thead`/`thead_mig` over their NVML-like
libraries (`nvmlike`), MetaX `metax` over MXSML (`mxsml`), MThreads `mthreads` over MTML
(`mtml`); `vendor` holds what they share."""
