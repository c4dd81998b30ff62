"""Every node's, switch's and VM's one state (`store`) and the site's one disruption budget (`budget`): the two
things provisioning, health, maintenance and rollouts all read before taking a member out of service."""
