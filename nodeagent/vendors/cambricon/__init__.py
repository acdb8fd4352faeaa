"""Cambricon MLUs: the CNDev binding, the detector, the responder and its sMLU driver, and the
recorded CNDev simulator."""
