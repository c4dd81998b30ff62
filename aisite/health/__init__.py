"""Node health: what a node's tools say (nvidia-smi, DCGM, the kernel log, its rails, file systems and clock)
read into facts, judged against the plan and the site's thresholds, and the quarantine that keeps a failing node
out of jobs without ever draining more than a site-set share of them.

`parse` and `judge` use the standard library alone: they run on the nodes (a systemd timer, a DaemonSet) as they
run in the tests."""
