"""rdma: the distribution's rdma-core installed, nvidia-peermem in the boot module list (InfiniBand pool), memlock
unlimited, the IPoIB interface from the stack."""


def test_inbox_userspace_installed(host):
    for name in ("rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags"):
        pkg = host.package(name)
        assert pkg.is_installed, name
    assert host.file("/usr/bin/ibv_devinfo").exists and host.file("/usr/sbin/ibstat").exists


def test_peermem_loaded_at_boot(host):
    lines = [ln for ln in host.file("/etc/modules-load.d/gpufleet-rdma.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert lines == ["nvidia_peermem"]


def test_memlock_unlimited(host):
    text = host.file("/etc/security/limits.d/91-gpufleet-rdma.conf").content_string
    lines = sorted(ln.split() for ln in text.splitlines() if ln and not ln.startswith("#"))
    assert lines == sorted([["*", "soft", "memlock", "unlimited"], ["*", "hard", "memlock", "unlimited"],
                            ["root", "soft", "memlock", "unlimited"], ["root", "hard", "memlock", "unlimited"]])


def test_ipoib_interface(host):
    f = host.file("/etc/systemd/network/60-gpufleet-ib0.network")
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for ln in f.content_string.splitlines():
        if ln.startswith("["):
            current = ln.strip("[]")
            sections[current] = {}
        elif "=" in ln and not ln.startswith("#"):
            k, v = ln.split("=", 1)
            sections[current][k] = v
    assert sections == {"Match": {"Name": "ib0"}, "Link": {"MTUBytes": "4092"}, "Network": {"Address": "10.20.0.11/16"}}
