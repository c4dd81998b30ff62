"""The renewal on a control-plane node's certificates: its timer in the node's slot, one certificate due renewed
and the control plane restarted once, nothing the second time, an API server that does not come back a failure."""

LOG = "/var/log/aisite-scripted.log"
PROM = "/var/lib/node_exporter/textfile_collector/aisite_k8s_certs.prom"
DUE = "openssl x509 -noout -checkend {seconds} -in /etc/kubernetes/pki/apiserver.crt"
ENV = (
    "K8S_CERTS_RENEW_DAYS=90 K8S_CERTS_API=https://127.0.0.1:6443/livez K8S_CERTS_API_TIMEOUT_S=3 "
    "K8S_CERTS_TEXTFILE_DIR=/var/lib/node_exporter/textfile_collector"
)


def _log(host):
    f = host.file(LOG)
    return f.content_string if f.exists else ""


def test_the_timer_runs_in_the_nodes_slot(host):
    timer = host.service("aisite-k8s-certs-renew.timer")
    assert timer.is_enabled and timer.is_running
    unit = host.file("/etc/systemd/system/aisite-k8s-certs-renew.timer").content_string
    assert "OnCalendar=Mon *-*-1..7 03:00:00" in unit
    assert host.run("systemd-analyze calendar 'Mon *-*-1..7 03:00:00'").rc == 0
    assert "K8S_CERTS_RENEW_DAYS=90" in host.file("/etc/aisite/k8s-certs-renew.env").content_string


def test_a_certificate_due_is_renewed_and_the_control_plane_restarted_once(host):
    assert host.run(DUE.format(seconds=90 * 86400)).rc == 1  # due, as prepared
    assert "kubeadm" not in _log(host)  # the converge renewed nothing itself
    r = host.run("systemctl start aisite-k8s-certs-renew.service")
    assert r.rc == 0, r.stderr
    log = _log(host)
    assert log.count("kubeadm certs renew all") == 1
    assert "crictl rmp -f pod-apiserver pod-etcd" in log
    assert host.run(DUE.format(seconds=300 * 86400)).rc == 0
    assert "aisite_k8s_certs_last_result 1" in host.file(PROM).content_string
    journal = host.run("journalctl -u aisite-k8s-certs-renew.service --no-pager").stdout
    assert "expiring within 90 days: apiserver.crt" in journal  # the CA, due in 5 days, is not kubeadm's


def test_nothing_due_runs_nothing(host):
    before = _log(host)
    assert host.run("systemctl start aisite-k8s-certs-renew.service").rc == 0
    assert _log(host) == before
    assert "aisite_k8s_certs_last_result 0" in host.file(PROM).content_string


def test_an_api_server_that_does_not_come_back_fails_the_renewal(host):
    host.run(
        "cd /etc/kubernetes/pki && openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -days 10 "
        "-out apiserver.crt"
    )
    assert host.run("systemctl stop fake-apiserver").rc == 0
    r = host.run(f"env {ENV} /usr/local/sbin/aisite-k8s-certs-renew")
    assert r.rc == 1 and "did not answer within 3 s" in r.stderr
    assert "aisite_k8s_certs_last_result -1" in host.file(PROM).content_string
