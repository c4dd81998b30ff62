"""Changing a running site: one disruption budget for every kind of work that takes a node or switch out of
service, the changes that need one out, and the waves a change rolls in."""
