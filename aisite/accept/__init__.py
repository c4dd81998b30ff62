"""Site acceptance (`aisite accept`): staged checks built from the plan (per node, per rail pair, per group), a
bisection that isolates a slow node or rail, and a report with a verdict per node and link."""
