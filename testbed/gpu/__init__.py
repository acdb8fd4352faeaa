"""The GPU proof: the NVIDIA detector and HAMi-core slicing on a real card (`prove.py`)."""
