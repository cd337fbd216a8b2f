"""``gpufleet inspect ibnetdiscover``: switches, GUIDs and the hosts under each leaf from a real capture
(tests/fixtures/ib/SOURCES.md), and the contract's error for what is not a capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.cli.inspect import app
from gpufleet.parsers import ParseError
from gpufleet.parsers.ibnetdiscover import parse_ibnetdiscover

CAPTURE = REPO_ROOT / "tests" / "fixtures" / "ib" / "ibnetdiscover_switchib-edr_6-switch-fat-tree_excerpt.txt"
LEAF, SPINE = "ec0d9a0300ec8240", "ec0d9a0300ec8200"
runner = CliRunner()


def test_real_capture_leaf_and_spine() -> None:
    fabric = parse_ibnetdiscover(CAPTURE.read_text())
    by_guid = {s.guid: s for s in fabric.switches}
    assert set(by_guid) == {LEAF, SPINE}
    leaf, spine = by_guid[LEAF], by_guid[SPINE]
    assert (leaf.level, leaf.lid, leaf.ports, leaf.description) == ("leaf", 48, 36, "SwitchIB Mellanox Technologies")
    # 24 HCAs on ports 1-12 and 25-36; ports 13-24 are six cables to each of two spines.
    assert [h.switch_port for h in leaf.hcas] == [*range(1, 13), *range(25, 37)]
    assert leaf.switch_links == {"ec0d9a0300ec81e0": 6, SPINE: 6}
    first = leaf.hcas[0]
    assert (first.host, first.hca, first.guid) == ("node018", "HCA-1", "506b4b03003fa9b6")
    # A GUID printed without its leading zero (8c0eb0300ddc0f6) is the node name's 16 digits.
    assert any(h.guid == "08c0eb0300ddc0f6" and h.host == "node046" for h in leaf.hcas)
    assert (spine.level, spine.hcas) == ("spine", ())
    assert spine.switch_links == {"ec0d9a0300ec8240": 6, "ec0d9a0300ec8480": 6, "ec0d9a0300f548c0": 6,
                                  "ec0d9a0300f548e0": 6}
    assert fabric.hosts_by_switch()[LEAF][:4] == ["gpu001", "gpu002", "gpu003", "node001"]


def test_cli_json() -> None:
    res = runner.invoke(app, ["ibnetdiscover", str(CAPTURE), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert [s["guid"] for s in d["switches"]] == [SPINE, LEAF]
    assert d["leaf_switches"] == 1 and len(d["hosts"]) == 24 and "controller" not in d["hosts"]
    # What a stack's hosts[].place takes (the leaf switch each host's HCA is cabled to).
    assert d["place"]["gpu001"] == {"switch": f"S-{LEAF}"} and len(d["place"]) == 24
    table = runner.invoke(app, ["ibnetdiscover", str(CAPTURE)], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "2 switches, 1 with HCAs, 24 hosts" in table.stdout


@pytest.mark.parametrize("text", [
    "",
    # ibstat output is not a fabric capture
    "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n",
    # ibnetdiscover -l lists nodes without Switch records
    'Ca   : 0x506b4b03003fa98a ports 1 "node019 HCA-1"\n',
])
def test_not_a_capture_is_a_parse_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ParseError, match="no Switch record"):
        parse_ibnetdiscover(text)
    f = tmp_path / "x.txt"
    f.write_text(text)
    res = runner.invoke(app, ["ibnetdiscover", str(f), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["error"]


def test_a_host_on_two_leaves_gets_no_single_place() -> None:
    text = ('Switch\t36 "S-00000000000000a1"\t# "leaf a" base port 0 lid 1 lmc 0\n'
            '[1]\t"H-0000000000000011"[1](11)\t# "gpu-0 mlx5_0" lid 5 4xNDR\n'
            'Switch\t36 "S-00000000000000a2"\t# "leaf b" base port 0 lid 2 lmc 0\n'
            '[1]\t"H-0000000000000012"[1](12)\t# "gpu-0 mlx5_1" lid 6 4xNDR\n'
            '[2]\t"H-0000000000000013"[1](13)\t# "gpu-1 mlx5_0" lid 7 4xNDR\n')
    fabric = parse_ibnetdiscover(text)
    assert fabric.hosts_by_switch() == {"00000000000000a1": ["gpu-0"], "00000000000000a2": ["gpu-0", "gpu-1"]}
    assert fabric.places() == {"gpu-1": {"switch": "S-00000000000000a2"}}
