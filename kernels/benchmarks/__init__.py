"""Benchmarks of the kernels against PyTorch's attention, one module per family (training, decode,
ring, fp8), and suite.py, which runs every GPU test and benchmark in one call on a device."""
