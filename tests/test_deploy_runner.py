"""ansible-runner as `deploy` drives it: a real playbook on this machine (local connection, nothing installed),
checking what the deploy record and `make bench-deploy` are built from: recap, changes, per-play and per-task
times, and how layer runs merge."""

from __future__ import annotations

from pathlib import Path

from aisite.deploy import merge, run_playbook

PLAYBOOK = """---
- name: Probe | Two tasks
  hosts: all
  gather_facts: false
  tasks:
    - name: Probe | Wait a moment
      ansible.builtin.command: sleep 0.4
      changed_when: true
      when: inventory_hostname == "probe"
    - name: Probe | Say nothing changed
      ansible.builtin.debug:
        msg: quiet
"""
INVENTORY = """all:
  hosts:
    probe:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
    quick:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""


def test_a_run_reports_changes_and_where_the_time_went(tmp_path: Path) -> None:
    book = tmp_path / "probe.yml"
    book.write_text(PLAYBOOK)
    r = run_playbook(str(book), INVENTORY)
    assert r.ok, r.failures
    assert r.recap["probe"].changed == 1 and r.recap["probe"].ok == 2
    assert r.changes == ["probe: Probe | Wait a moment"]
    wait, say = "Probe | Two tasks | Probe | Wait a moment", "Probe | Two tasks | Probe | Say nothing changed"
    assert set(r.walls) == {wait, say}
    # The wall of a task covers its host's run of it; the play covers its tasks.
    assert r.walls[wait] >= 0.4 and r.tasks[wait] >= 0.4
    assert r.walls[say] < r.walls[wait]
    assert r.plays["Probe | Two tasks"] >= r.walls[wait] + r.walls[say] - 0.05
    assert r.slowest_walls(1) == [(wait, r.walls[wait])]
    # Per play, each host's tasks summed: the one that waited is the slowest, by at least its wait.
    by_host = r.hosts["Probe | Two tasks"]
    assert set(by_host) == {"probe", "quick"} and by_host["probe"] >= by_host["quick"] + 0.3
    assert r.slowest_hosts(1) == {"Probe | Two tasks": [("probe", by_host["probe"])]}

    both = merge([r, r])
    assert both.ok and both.recap["probe"].changed == 2
    assert both.walls[wait] == round(2 * r.walls[wait], 2)
    assert both.changes == r.changes * 2
    assert both.hosts["Probe | Two tasks"]["probe"] == round(2 * by_host["probe"], 2)
