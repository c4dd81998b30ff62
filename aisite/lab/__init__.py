"""The emulated lab: a site's plan rehearsed on one machine with podman (nodes, FRR switches, veth cabling)."""
