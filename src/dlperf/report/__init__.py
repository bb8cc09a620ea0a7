"""Reports from the results database: Markdown and HTML (DLPerf-style tables and plots), CSV and
JSON export, and the comparison of two sets of results."""
