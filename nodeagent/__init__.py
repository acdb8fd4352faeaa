"""The node agent: detects the node's accelerators and reports them (`NodeFeature`, `Devices`).

- `detect/`: the detector contract, the PCI pre-check, held results, the detect loop, NVIDIA.
- `simulate/`: simulated NVIDIA hardware behind the same NVML surface, with shipped profiles.
- `report`: pure builders of the NodeFeature and Devices objects.
- `cli`: `python -m nodeagent detect [--simulate PROFILE] [-o yaml|json]`.
"""
