"""The checkpoints in a folder of the site's storage, one JSON line: what `aisite promote` chooses the newest of.

    python3 checkpoints.py /datasets/models/classifier

Regular files named VERSION.pt only (links are not followed), at most --limit entries read: a folder of the
storage is written by training jobs, so what it holds is bounded and never trusted. The lab reads the same
function through a node's mount; a site runs it as a Job in the tenant's namespace.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

SCHEMA = "aisite.checkpoints/v1"
SUFFIX = ".pt"
LIMIT = 10_000


def checkpoints(folder: str, limit: int = LIMIT) -> list[tuple[str, float]]:
    """(file name stem, modification time) of each checkpoint in `folder`; none where it is missing."""
    if not os.path.isdir(folder):
        return []
    found = []
    with os.scandir(folder) as entries:
        for entry in itertools.islice(entries, limit):
            if entry.name.endswith(SUFFIX) and entry.is_file(follow_symlinks=False):
                found.append((entry.name.removesuffix(SUFFIX), entry.stat(follow_symlinks=False).st_mtime))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--limit", type=int, default=LIMIT)
    args = p.parse_args(argv)
    found = checkpoints(args.folder, max(1, min(args.limit, LIMIT)))
    print(json.dumps({"schema": SCHEMA, "checkpoints": [[n, round(m, 3)] for n, m in found]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
