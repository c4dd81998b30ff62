"""Installing nodes: their OS image, the network boot that installs it, and the waves that run it."""
