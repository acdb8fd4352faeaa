"""AMD's GPUs: the `amdsmi` binding, the detector, the responder (CU-masked slices) and the
`amdsmi` profile simulator."""
