"""GPU target: CUDA attention kernels (naive, fused, flash) compiled at run time by CuPy, and their tools."""
