"""gpufleet.topology: every real ``topo -m`` matrix and ``nvlink -s`` capture parses to the values it shows;
render() gives text that parses back to the same model; ``gpufleet inspect topo`` prints the model as JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.cli.inspect import app
from gpufleet.parsers import ParseError
from gpufleet.topology import build_board, parse_nvlink_status, parse_topo_m, render_topo_m

REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real"
TOPO = REAL / "topo"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent")
runner = CliRunner()

H100 = "h100-80gb-hbm3_x8_nv18_8-nics-pix_driver570.133.20_topo-m_space-separated.txt"
H200 = "h200_x8_nv18_12-nics_spr-56c-numa01_topo-m.txt"
B300 = "b300-sxm6-ac_x8_nv18_9-nics-incl-bond_driver590.44.01_topo-m_ansi.txt"
DGXA100 = "dgx-a100_8x-a100-sxm4_nv12_12x-mlx5_nps4-numa1357_topo-m.txt"
DGX1 = "dgx1_8x-v100_pcie-pix-phb_4x-mlx5_topo-mp.txt"
RTX = "rtx6000ada_x4_pcie-only_asus-esc8000a-e12_4-nics_topo-m.txt"
VM = "h100-sxm-80gb-hbm3_driver590.48.01_1gpu-vm_topo-m.txt"

# file -> (GPUs, NICs, {gpu: (cpu_affinity, numa_node, nearest NICs)}, NVLink count between GPU0 and GPU1)
EXPECTED: dict[str, tuple[int, int, dict[int, tuple[str, int | None, list[str]]], int | None]] = {
    H100: (8, 8, {0: ("0-47,96-143", 0, ["mlx5_0"]), 5: ("48-95,144-191", 1, ["mlx5_5"])}, 18),
    H200: (8, 12, {0: ("0-55,112-167", 0, ["mlx5_0"]), 1: ("0-55,112-167", 0, ["mlx5_3"]),
                   5: ("56-111,168-223", 1, ["mlx5_9"]), 7: ("56-111,168-223", 1, ["mlx5_11"])}, 18),
    B300: (8, 9, {0: ("0-63,128-191", 0, ["mlx5_10"]), 7: ("64-127,192-255", 1, ["mlx5_17"])}, 18),
    # NPS4: the GPUs' NUMA nodes are 3, 1, 7, 5 and two GPUs share a PCIe switch with two HCAs.
    DGXA100: (8, 12, {0: ("48-63,176-191", 3, ["mlx5_0", "mlx5_1"]), 2: ("16-31,144-159", 1, ["mlx5_2", "mlx5_3"]),
                      4: ("112-127,240-255", 7, ["mlx5_6", "mlx5_7"]), 7: ("80-95,208-223", 5, ["mlx5_8", "mlx5_9"])},
              12),
    DGX1: (8, 4, {0: ("0-19,40-59", 0, ["mlx5_0"]), 3: ("0-19,40-59", 0, ["mlx5_1"]),
                  6: ("20-39,60-79", 1, ["mlx5_3"])}, None),
    RTX: (4, 4, {0: ("0-31", 0, ["mlx5_0", "mlx5_1"]), 3: ("32-63", 1, ["mlx5_2", "mlx5_3"])}, None),
    VM: (1, 0, {0: ("0-19", 0, [])}, None),
}


def _load(name: str) -> str:
    return (TOPO / name).read_text()


@needs_shared
def test_every_real_matrix_is_covered() -> None:
    assert {p.name for p in TOPO.glob("*topo-m*")} == set(EXPECTED)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_matrix_parses_to_its_values(name: str) -> None:
    gpus, nics, per_gpu, nv01 = EXPECTED[name]
    topo = parse_topo_m(_load(name))
    data = topo.to_dict()
    assert (topo.gpu_count, len(data["nics"])) == (gpus, nics)
    for index, (cpus, numa, nearest) in per_gpu.items():
        g = data["gpus"][index]
        assert (g["index"], g["cpu_affinity"], g["numa_node"], g["nearest_nics"]) == (index, cpus, numa, nearest)
    assert data["gpus"][0]["nvlink"].get("1") == nv01
    # Every GPU pair is the same class in both directions, and NVLink peers are symmetric.
    for g in data["gpus"]:
        for peer, links in g["nvlink"].items():
            assert data["gpus"][int(peer)]["nvlink"][str(g["index"])] == links
    assert data["legend"]["PIX"] == "Connection traversing at most a single PCIe bridge"


@needs_shared
def test_nics_named_by_their_legend_and_nearest_gpus() -> None:
    b300 = parse_topo_m(_load(B300)).to_dict()
    assert [n["name"] for n in b300["nics"]] == [f"mlx5_{k}" for k in range(10, 18)] + ["mlx5_bond_0"]
    assert b300["nics"][8]["nearest_gpus"] == [4, 5, 6, 7]  # the bond: NODE to the second socket's GPUs
    h200 = parse_topo_m(_load(H200)).to_dict()
    nics = {n["name"]: n["nearest_gpus"] for n in h200["nics"]}
    assert nics["mlx5_3"] == [1]
    assert nics["mlx5_1"] == [0, 1, 2, 3]  # a front-end/storage port: no GPU behind its switch
    # Pre-NIC-Legend drivers print the device names as the columns.
    dgx = parse_topo_m(_load(DGXA100))
    assert dgx.nic_labels[0] == "mlx5_0" and dgx.nic_names == {}


@needs_shared
def test_hcas_in_gpu_order_skip_storage_and_frontend_ports() -> None:
    h200 = parse_topo_m(_load(H200))
    assert h200.hcas_in_gpu_order() == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10",
                                        "mlx5_11"]
    assert h200.rail_nics() == sorted(h200.hcas_in_gpu_order(), key=lambda n: int(n.split("_")[1]))
    dgx = parse_topo_m(_load(DGXA100))
    assert "mlx5_4" not in dgx.hcas_in_gpu_order() and "mlx5_10" not in dgx.hcas_in_gpu_order()
    assert "mlx5_bond_0" not in parse_topo_m(_load(B300)).hcas_in_gpu_order()


@needs_shared
@pytest.mark.parametrize("bundle", sorted(p.name for p in (REAL / "nvidia-smi-csv").glob("*_full-capture.txt")))
def test_topo_section_inside_capture_bundles(bundle: str) -> None:
    text = (REAL / "nvidia-smi-csv" / bundle).read_text()
    topo = parse_topo_m(text)
    cpus = {"h100": "0-19", "h200": "0-23", "l40s": "0-7"}[bundle.split("_")[0].split("-")[0]]
    assert topo.to_dict()["gpus"] == [{"index": 0, "numa_node": 0, "cpu_affinity": cpus, "gpu_numa_id": None,
                                       "nvlink": {}, "nearest_nics": []}]
    assert topo.nic_labels == []


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_render_parses_back_to_the_same_model(name: str) -> None:
    topo = parse_topo_m(_load(name))
    assert parse_topo_m(render_topo_m(topo)) == topo


@needs_shared
def test_render_matches_the_byte_exact_590_capture() -> None:
    # The 1-GPU VM capture is byte-exact from a 590.48.01 driver: render() prints the same bytes.
    assert render_topo_m(parse_topo_m(_load(VM))) == _load(VM)


@needs_shared
def test_ansi_and_spaces_are_only_presentation() -> None:
    b300 = _load(B300)
    assert "\x1b[4m" in b300
    plain = re.sub(r"\x1b\[[0-9;]*m", "", b300).expandtabs(8)
    assert parse_topo_m(plain) == parse_topo_m(b300)


def test_numa_na_is_null_and_no_numa_columns() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\tN/A\tN/A\nGPU1\tSYS\t X \tN/A\tN/A\n"
    data = parse_topo_m(text).to_dict()
    assert [(g["numa_node"], g["cpu_affinity"]) for g in data["gpus"]] == [(None, None), (None, None)]
    old = parse_topo_m("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-11\nGPU1\tPHB\t X \t0-11\n")
    assert old.to_dict()["gpus"][1]["cpu_affinity"] == "0-11"
    assert old.to_dict()["gpus"][1]["numa_node"] is None


@pytest.mark.parametrize(("text", "message"), [
    ("", "no nvidia-smi topo -m matrix"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "Driver/library version mismatch"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV18\n", "matrix ends after 1 of 2 rows"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV12\t X \n", "not symmetric: GPU0-GPU1 is NV18"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\tQPI\n", "GPU1 has 2 connection cells"),
    ("\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n", "NIC Legend lacks NIC0"),
])
def test_unparsable_matrices_say_why(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_topo_m(text)


def test_board_model_round_trips() -> None:
    board = build_board(gpus=8, nvlink=18, numa_cpus=("0-47,96-143", "48-95,144-191"), nics=8)
    assert parse_topo_m(render_topo_m(board)) == board
    assert board.hcas_in_gpu_order() == [f"mlx5_{k}" for k in range(8)]
    assert board.nvlink(3) == {i: 18 for i in range(8) if i != 3}
    pcie = build_board(gpus=4, nvlink=0, numa_cpus=("0-31", "32-63"))
    assert pcie.cell("GPU0", "GPU1") == "NODE" and pcie.cell("GPU0", "GPU2") == "SYS"


@needs_shared
def test_nvlink_status_captures() -> None:
    a100 = parse_nvlink_status((TOPO / "a100-sxm4-80gb_x8_nvlink-status.txt").read_text())
    assert [g.active_links for g in a100] == [12] * 8
    assert set(a100[7].links.values()) == {25.0}
    p4de = parse_nvlink_status((TOPO / "a100-sxm4-80gb_p4de_nvlink-s_gpu0.txt").read_text())
    assert (len(p4de), p4de[0].active_links) == (1, 12)
    h100 = parse_nvlink_status((TOPO / "h100-sxm-80gb-hbm3_driver590.48.01_1gpu-vm_nvlink-s.txt").read_text())
    assert (h100[0].active_links, h100[0].links[17]) == (18, 26.562)
    mig = parse_nvlink_status((TOPO / "h200_driver590.48.01_mig-enabled_nvlink-s.txt").read_text())
    assert (mig[0].active_links, mig[0].note) == (0, "Nvlink queries are not supported for Devices in MIG mode")
    l40s = parse_nvlink_status((TOPO / "l40s_driver595.80_fedora44_nvlink-s.txt").read_text())
    assert l40s[0].note == "Device does not have or support Nvlink"
    inactive = parse_nvlink_status("GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n")
    assert (inactive[0].active_links, inactive[0].inactive) == (1, (1,))


@needs_shared
def test_inspect_topo_json() -> None:
    res = runner.invoke(app, ["topo", str(TOPO / H100), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["gpus"][0] == {"index": 0, "numa_node": 0, "cpu_affinity": "0-47,96-143", "gpu_numa_id": None,
                            "nvlink": {str(i): 18 for i in range(1, 8)}, "nearest_nics": ["mlx5_0"]}
    assert d["nics"][0]["name"] == "mlx5_0" and d["nics"][0]["nearest_gpus"] == [0]
    assert set(d["legend"]) == {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}
    table = runner.invoke(app, ["topo", str(TOPO / H200)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "mlx5_11" in table.stdout


def test_inspect_topo_error(tmp_path: Path) -> None:
    f = tmp_path / "smi.txt"
    f.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    res = runner.invoke(app, ["topo", str(f), "--json"])
    assert res.exit_code != 0
    assert "no nvidia-smi topo -m matrix" in res.stderr and "couldn't communicate" in res.stderr


@needs_shared
def test_inspect_nvlink_json() -> None:
    res = runner.invoke(app, ["nvlink", str(TOPO / "a100-sxm4-80gb_x8_nvlink-status.txt"), "--json"])
    assert res.exit_code == 0, res.output
    assert [g["active_links"] for g in json.loads(res.stdout)["gpus"]] == [12] * 8


@needs_shared
def test_slurm_gres_cores_and_links() -> None:
    from gpufleet.module_utils.topology import slurm_gres

    h100 = slurm_gres(parse_topo_m(_load(H100)), threads_per_core=2)
    assert [(g["file"], g["cores"]) for g in h100][3:5] == [("/dev/nvidia3", "0-47"), ("/dev/nvidia4", "48-95")]
    assert h100[2]["links"] == "18,18,-1,18,18,18,18,18"
    # NPS4 DGX A100 (256 CPUs, 2 threads per core): GPU0's CPUs 48-63,176-191 are cores 48-63.
    assert slurm_gres(parse_topo_m(_load(DGXA100)), threads_per_core=2)[0]["cores"] == "48-63"
    # PCIe-only: no Links; one thread per core keeps CPU ids as core indices.
    rtx = slurm_gres(parse_topo_m(_load(RTX)), threads_per_core=1)
    assert [(g["cores"], g["links"]) for g in rtx] == [("0-31", None)] * 2 + [("32-63", None)] * 2
