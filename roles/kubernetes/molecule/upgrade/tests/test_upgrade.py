"""kubeadm's upgrade of a member from 1.34.4 to 1.35.6 against the scripted cluster (build-repo.sh), checked against
kubeadm's documented order (https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/):
the new kubeadm first; on the first control-plane node an etcd snapshot, `upgrade plan`, `upgrade apply`; on a
worker `upgrade node`; then the kubelet and kubectl, held, and the kubelet restarted on its new version. A worker
asked before the control plane moved was refused with nothing changed (prepare.yml)."""

PACKAGES = ("kubeadm", "kubelet", "kubectl")


def _is_cp(host):
    return host.backend.get_hostname().endswith("-cp")


def _sequence(host):
    """What the scripted programs were asked, less `kubeadm version` (a read), in order, after the 1.34.4 install."""
    lines = host.file("/var/log/aisite-scripted.log").content_string.splitlines()
    return [x for x in lines if " version" not in x]


def test_the_upgrade_ran_in_kubeadms_order(host):
    if _is_cp(host):
        expected = [
            "etcd-backup",
            "kubeadm-1.35.6 upgrade plan v1.35.6",
            "kubeadm-1.35.6 upgrade apply v1.35.6 --yes",
            "kubelet-1.35.6 start",
        ]
    else:
        expected = ["kubeadm-1.35.6 upgrade node", "kubelet-1.35.6 start"]
    assert _sequence(host) == expected


def test_every_package_is_the_new_version_and_held(host):
    installed = host.check_output("dpkg-query -W -f '${Package}=${Version}\\n' kubeadm kubelet kubectl")
    assert sorted(installed.split()) == sorted(f"{p}=1.35.6-1.1" for p in PACKAGES)
    assert set(PACKAGES) <= set(host.check_output("apt-mark showhold").split())


def test_the_source_and_the_pin_name_the_new_minor(host):
    source = host.file("/etc/apt/sources.list.d/aisite-kubernetes.sources").content_string
    assert "URIs: file:///srv/aisite-k8s/v1.35/" in source
    assert "Pin: version 1.35.6-*" in host.file("/etc/apt/preferences.d/aisite-kubernetes.pref").content_string


def test_the_kubelet_runs_its_new_version(host):
    assert host.service("kubelet").is_running
    assert "kubelet 1.35.6" in host.check_output("head -n 2 /usr/bin/kubelet")


def test_a_worker_before_the_control_plane_was_refused_unchanged(host):
    if _is_cp(host):
        assert not host.file("/root/refused.txt").exists
        return
    refused = host.file("/root/refused.txt").content_string
    assert "the API server runs 1.34.4, older than 1.35.6" in refused and "nothing was changed" in refused
    # The pin the refused run left: still the old version.
    assert "Pin: version 1.34.4-*" in refused
