"""How a repeat's processes start: the launcher interface, spawn, the guard, Slurm, one module per framework (harness side)."""
