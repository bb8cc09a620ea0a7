"""Input data the worker reads: image folders, synthetic batches, and the JPEG set `dlperf data make-images` writes (worker side: Python 3.7, no harness import)."""
