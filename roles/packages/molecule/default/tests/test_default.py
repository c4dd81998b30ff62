"""packages on a lone node container: what was missing is installed, what was there stays."""


def test_the_missing_package_is_installed_and_the_present_one_kept(host):
    assert host.package("tree").is_installed
    assert host.package("chrony").is_installed
    assert host.run("tree -L 1 /etc/apt").rc == 0
