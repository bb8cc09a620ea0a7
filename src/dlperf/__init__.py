"""dlperf: trustworthy deep-learning framework benchmarks.

This package root is imported by the worker inside framework environments, so it must stay
standard-library only and valid Python 3.7.
"""

__version__ = "0.1.0"
