"""Huawei Ascend NPUs: the DCMI binding, the detector, the responder (vcann-rt slices; the A5's
product in `product.py`) and the recorded DCMI simulator."""
