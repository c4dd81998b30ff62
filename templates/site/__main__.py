"""Pulumi entry point: `pulumi up --stack <site>` deploys the site declared in stacks/Pulumi.<site>.yaml."""

from aisite.program import run

run()
