"""Property tests per input surface (issue 27 point 7): any generated input is accepted or refused with the
one error each surface raises (ParseError, InputError, the grammar's error); never another exception.

Inputs are built from the surface's own vocabulary (header words, numbers of any length, separators, tags) so
the generator reaches the parsers' branches rather than only their first "not a header" check.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.errors import InputError
from gpufleet.parsers import ParseError
from gpufleet.parsers.nccl import parse_nccl
from gpufleet.parsers.smi_xml import parse_smi_xml
from gpufleet.topology import parse_nvlink_status, parse_topo_m

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NUMBER = st.one_of(st.integers(min_value=-(10**40), max_value=10**40).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.text("0123456789.-eE", min_size=1, max_size=60),
                   st.sampled_from(["9" * 5000, "1e999", "nan", "N/A", "\uff11\uff12"]))
WORD = st.one_of(NUMBER, st.sampled_from(["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                                          "#wrong", "float", "sum", "-1", "GPU0", "GPU1", "NIC0", "X", "NV18",
                                          "PIX", "SYS", "CPU Affinity", "NUMA Affinity", "0-47", "0-400000000",
                                          "Link", "GB/s", "GPU", "(UUID:", "GPU-1)", "{", "}", "[", "]", '"results":',
                                          "Rank", "Pid", "on", "device", "Avg bus bandwidth :"]),
                 st.text(max_size=8))
LINE = st.lists(WORD, max_size=14).map("  ".join)
TEXT = st.lists(LINE, max_size=12).map("\n".join)


@SETTINGS
@given(TEXT)
def test_nccl_parser_accepts_or_raises_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_nccl(text)


@SETTINGS
@given(st.one_of(TEXT, st.builds(lambda rows: '{"results": [' + ",".join(rows) + "]}",
                                 st.lists(st.builds(lambda n, b: f'{{"size": {n}, "count": 1, "type": "float", '
                                                                 f'"redop": "sum", "out_of_place": {{"time": 1, '
                                                                 f'"alg_bw": 1, "bus_bw": {b}}}}}', NUMBER, NUMBER),
                                          max_size=3))))
def test_nccl_json_accepts_or_raises_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_nccl(text)


@SETTINGS
@given(TEXT)
def test_topology_parsers_accept_or_raise_parse_error(text: str) -> None:
    for parse in (parse_topo_m, parse_nvlink_status):
        with contextlib.suppress(ParseError):
            parse(text)


TAG = st.sampled_from(["gpu", "driver_version", "product_name", "gpu_power_readings", "requested_power_limit",
                       "temperature", "gpu_temp", "ecc_errors", "volatile", "double_bit", "total", "x"])
XML = st.recursive(st.one_of(NUMBER, st.text(max_size=10)),
                   lambda inner: st.builds(lambda t, kids: f"<{t}>{''.join(kids)}</{t}>", TAG,
                                           st.lists(inner, max_size=4)), max_leaves=25)


@SETTINGS
@given(st.one_of(XML.map(lambda body: f"<nvidia_smi_log>{body}</nvidia_smi_log>"), st.text(max_size=200)))
def test_smi_xml_parser_accepts_or_raises_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_smi_xml(text)


YAML_SCALAR = st.one_of(NUMBER, st.text(max_size=12), st.sampled_from([".inf", ".nan", "0x" + "f" * 50, "&a x",
                                                                       "*a", "!unsafe x", "!!python/none", "~"]))
YAML = st.recursive(YAML_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.dictionaries(st.text("abc:", min_size=1, max_size=4), inner, max_size=4).map(
        lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}")), max_leaves=20)


@SETTINGS
@given(YAML)
def test_yaml_accepts_or_raises_input_error(text: str) -> None:
    from gpufleet.inputs import loads_yaml

    with contextlib.suppress(InputError):
        loads_yaml(f"config: {text}\n", "f.yaml")


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.lists(st.one_of(WORD, st.sampled_from(["*", "*/5", "1-3", "jan",
                                                                                 "mon", "@daily"])),
                                                min_size=1, max_size=6).map(" ".join)))
def test_cron_grammar_accepts_or_refuses_with_its_error(text: str) -> None:
    from pydantic_core import PydanticCustomError

    from gpufleet.spec import _cron

    try:
        assert _cron(text) == text
    except PydanticCustomError:
        return
    assert text.isascii() and "\n" not in text


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.ip_addresses().map(str),
                 st.builds(lambda a, z: f"{a}%{z}", st.ip_addresses(v=6).map(str), st.text(max_size=8))))
def test_address_grammar_accepts_or_refuses_with_its_error(text: str) -> None:
    from pydantic_core import PydanticCustomError

    from gpufleet.spec import _address

    try:
        assert _address(text) == text
    except PydanticCustomError:
        return
    assert text.isascii() and "%" not in text and "\n" not in text


@pytest.mark.parametrize("value", ["", "0", "1" * 40])
def test_the_properties_cover_the_edges_they_name(value: str) -> None:
    # Deterministic edges next to the generated ones (kept small: hypothesis finds the rest).
    with pytest.raises(ParseError):
        parse_nccl(value)


PATH_PART = st.sampled_from(["", ".", "..", "usr", "etc", "scratch", "lustre", "a b", "x\n", "\uff55sr", "dev",
                             "nvme2n1"])


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.lists(PATH_PART, max_size=6).map(lambda p: "/" + "/".join(p)),
                 st.lists(PATH_PART, max_size=6).map(lambda p: "/".join(p) + "/")))
def test_path_grammars_accept_in_one_spelling_or_refuse_with_their_error(text: str) -> None:
    """Issue 27 class 2: an accepted path is stored in its one spelling (normalising it again changes nothing,
    no '.', '..' or empty segment, no trailing '/'), a mount point is never a system directory in any spelling,
    a device path stays under /dev; anything else is the grammar's error."""
    from pydantic_core import PydanticCustomError

    from gpufleet.spec import _clean_path, _device_path, _mount_path, system_paths

    for check in (_clean_path, _mount_path, _device_path):
        try:
            path = check(text)
        except PydanticCustomError:
            continue
        assert _clean_path(path) == path and path.isascii() and path.startswith("/")
        assert path == "/" or not any(seg in ("", ".", "..") for seg in path.split("/")[1:]), path
        if check is _mount_path:
            assert path not in system_paths()
        if check is _device_path:
            assert path.startswith("/dev/")


@SETTINGS
@given(st.ip_addresses(), st.sampled_from(["compressed", "exploded", "upper", "mapped"]))
def test_every_spelling_of_an_address_is_one_host(ip: object, spelling: str) -> None:
    import ipaddress

    from gpufleet.spec import Host, _same_host

    assert isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    text = {"compressed": ip.compressed, "exploded": ip.exploded, "upper": ip.exploded.upper(),
            "mapped": f"::ffff:{ip}" if ip.version == 4 else ip.compressed}[spelling]
    assert _same_host(Host(name="h", address=text)) == _same_host(Host(name="h", address=str(ip)))
