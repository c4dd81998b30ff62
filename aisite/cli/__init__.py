"""The `aisite` command: validate, plan, render and deploy a site without the Pulumi engine; the out-of-band
network, the emulated lab and benchmarks. One module per concern; each registers its commands on the shared app.

Exit codes: 0 ok; 2 invalid input (every problem on stderr as `path: message`, nothing written); 1 any other
failure.
"""

from __future__ import annotations

import sys

from aisite.cli import (
    accept,
    bench,
    deploy,
    health,
    init,
    lab,
    maintenance,
    oob,
    provision,
    reconcile,
    serving,
    site,
)
from aisite.cli.common import EXIT_FAILED, app
from aisite.cli.effects import state_effects
from aisite.errors import RecordError

__all__ = ["app", "main"]

# In the order `aisite --help` lists them: make a site repository, read a site, run it, then its out-of-band
# network and the lab.
app.command("init")(init.init_command)
app.command()(site.validate)
app.command("schema")(site.schema_command)
app.command()(site.plan)
app.command()(site.render)
app.command()(site.images)
app.command("provision")(provision.provision_command)
app.command()(deploy.deploy)
app.command()(deploy.cabling)
app.command()(reconcile.diff)
app.add_typer(reconcile.reconcile_app, name="reconcile")
app.add_typer(maintenance.maintenance_app, name="maintenance")
app.add_typer(oob.oob_app, name="oob")
app.add_typer(lab.lab_app, name="lab")
app.add_typer(bench.bench_app, name="bench")
app.command("promote")(serving.promote_command)
app.add_typer(serving.serve_app, name="serve")
app.command("accept")(accept.accept_command)
app.command("health")(health.health_command)
app.command("status")(maintenance.status_all_command)
app.command(hidden=True)(deploy.play)
state_effects(app)


def main() -> None:
    try:
        app(prog_name="aisite")  # as installed, also when run as `python -m aisite`
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except RecordError as exc:
        # This machine's record of the members' states does not read: said, nothing decided on a guess.
        print(f"error: {exc} (the members' states; fix or remove the file)", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except OSError as exc:
        # A file that cannot be read or written is a failure of the run, not of the site: exit 1, no traceback.
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
