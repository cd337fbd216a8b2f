"""local_scratch over a captured DGX H100 whose eight data drives carry the scratch RAID 0: the tools installed,
the ARRAY line in mdadm.conf by the array's UUID, the fstab entry by the file system's UUID. Not mounted: the node
is a container (local_scratch_apply false), which the last test states."""

FSTAB = "UUID=1d4e7f2a-6b3c-4e59-8a17-c0d2e3f4a5b6 /scratch xfs defaults,noatime,nofail 0 0"


def test_md_and_xfs_tools_installed(host):
    for name in ("mdadm", "xfsprogs"):
        assert host.package(name).is_installed, name
    assert host.file("/sbin/mdadm").exists and host.file("/sbin/mkfs.xfs").exists


def test_array_line_by_uuid(host):
    lines = [ln for ln in host.file("/etc/mdadm/mdadm.conf").content_string.splitlines()
             if ln.startswith("ARRAY")]
    assert lines == ["ARRAY /dev/md/scratch metadata=1.2 UUID=9f0c4a2e:51b37d68:a4c23e1f:0b7d9a85"]


def test_fstab_entry_by_filesystem_uuid(host):
    entries = [ln.split() for ln in host.file("/etc/fstab").content_string.splitlines()
               if ln.strip() and not ln.startswith("#")]
    assert [e for e in entries if e[1] == "/scratch"] == [FSTAB.split()]


def test_not_mounted_in_a_container(host):
    # local_scratch_apply false: fstab is written, the drives (the host's) are never touched or mounted.
    assert not host.mount_point("/scratch").exists
