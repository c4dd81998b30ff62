"""NFS-Ganesha exports on the storage node, reached from the GPU node over NFSv4 with libnfs."""

import testinfra


def test_storage_node_serves_the_exports_to_its_network_only(host):
    if not host.backend.get_hostname().endswith("-stor"):
        return
    assert host.service("nfs-ganesha").is_running and host.service("nfs-ganesha").is_enabled
    conf = host.file("/etc/ganesha/ganesha.conf").content_string
    assert "Path = /srv/datasets;" in conf and "Path = /srv/home;" in conf
    assert "Squash = Root_Squash;" in conf and "Graceless = true;" in conf
    assert "Clients = 10." in conf and "0/24;" in conf  # the scenario network, not everyone
    assert host.socket("tcp://0.0.0.0:2049").is_listening or host.socket("tcp://:::2049").is_listening


def test_gpu_node_reads_the_exports_with_libnfs(host):
    if not host.backend.get_hostname().endswith("-gpu"):
        return
    fstab = host.file("/etc/fstab").content_string
    assert " /mnt/datasets nfs4 rw,hard,noatime,vers=4.2,_netdev,nofail " in fstab
    line = next(x for x in fstab.splitlines() if "/mnt/datasets" in x)
    server = line.split(":")[0]
    stor = testinfra.get_host("podman://" + host.backend.get_hostname().removesuffix("-gpu") + "-stor")
    stor.run_expect([0], "sh -c 'echo aisite > /srv/datasets/probe.txt'")
    listing = host.run(f"nfs-ls 'nfs://{server}/srv/datasets?version=4'")
    assert listing.rc == 0 and "probe.txt" in listing.stdout, listing.stdout + listing.stderr
    cat = host.run(f"nfs-cat 'nfs://{server}/srv/datasets/probe.txt?version=4'")
    assert cat.stdout.strip() == "aisite", cat.stderr
    # Root is squashed: the client's root may not write into the server's root-owned directory.
    host.run("sh -c 'echo x > /tmp/x.txt'")
    assert host.run(f"nfs-cp /tmp/x.txt 'nfs://{server}/srv/home/x.txt?version=4'").rc != 0
