"""Hygon DCUs: the ROCm SMI and DMI bindings, the detector, Multi-Instance detection and driver,
the responder, and the recorded simulator with its DMI."""
