"""The GPU tests (a package, so that its conftest is ``gpu.conftest`` and never replaces the
``conftest`` module the other tests import)."""
