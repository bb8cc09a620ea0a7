"""What is measured about the machine: host state per repeat, the resource monitor and timelines, the measurement lock, `system` checks, sysinfo and peaks (harness side)."""
