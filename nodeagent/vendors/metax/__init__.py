"""MetaX GPUs: the MXSML binding, the detector, the responder and its `sgpu` driver, and the
recorded MXSML simulator."""
