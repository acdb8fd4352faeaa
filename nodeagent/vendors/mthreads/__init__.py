"""Moore Threads GPUs: the MTML binding, the detector, the responder and the recorded MTML
simulator."""
