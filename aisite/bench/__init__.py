"""Benchmarks of a site: results collected from the payloads' output, runs on the lab, the judged report."""
