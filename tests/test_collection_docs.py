"""Every module of the project's collection documents itself as Ansible reads it (ansible-doc parses its
DOCUMENTATION, EXAMPLES and RETURN as YAML: a plain ': ' in a description once hid two modules' pages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aisite.playbooks import PLUGINS

ROOT = Path(__file__).resolve().parent.parent
MODULES = PLUGINS / "modules"


def test_ansible_doc_reads_every_modules_documentation() -> None:
    names = sorted(p.stem for p in MODULES.glob("*.py") if not p.name.startswith("_"))
    assert "ceph_auth" in names and len(names) >= 6, names
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    cmd = [str(Path(sys.executable).parent / "ansible-doc"), "--json", *(f"aisite.site.{n}" for n in names)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "[ERROR]" not in r.stderr, r.stderr[-2000:]
    docs = json.loads(r.stdout)
    assert sorted(docs) == [f"aisite.site.{n}" for n in names]
    for name, page in docs.items():
        assert page["doc"]["options"] and page["examples"] and page["return"], name
    # The Ceph modules share their `cluster` option through the collection's doc fragment.
    ceph = [n for n in names if n.startswith("ceph_")]
    assert all("cluster" in docs[f"aisite.site.{n}"]["doc"]["options"] for n in ceph), ceph
