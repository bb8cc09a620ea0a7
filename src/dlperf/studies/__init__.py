"""Studies built on the runner: each answers one question with many cases (harness side)."""
