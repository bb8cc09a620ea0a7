"""The worker side: runs inside a framework's environment, one process per repeat (and rank).

Everything under this package imports only the standard library, numpy and the framework, and
stays valid Python 3.7, so any framework environment can run it from the source tree.
"""
