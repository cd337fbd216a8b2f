"""mdtest output parsing (real captures of mdtest 1.9.3, 3.4.0+dev and 4.0.0) and the metadata gates."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.parsers import ParseError
from gpufleet.validation.mdtest import MdtestGate, gate_mdtest, parse_mdtest

FIXTURES = Path(__file__).parent / "fixtures" / "mdtest"
BEEGFS = FIXTURES / "fredhutch-beegfs_mdtest-1.9.3_3iter.txt"
DAOS_34 = FIXTURES / "daos-docs_mdtest-3.4.0+dev_create-only.txt"
DAOS_40 = FIXTURES / "daos-docs_mdtest-4.0.0_create-only.txt"
CREATE_ROW = "   File creation     :        439.763        404.632        422.661         14.357"


def test_real_beegfs_capture() -> None:
    r = parse_mdtest(BEEGFS.read_text())
    assert (r.version, r.tasks, r.nodes, r.iterations) == ("1.9.3", 1, 1, 3)
    assert [x.operation for x in r.rates] == ["File creation", "File stat", "File read", "File removal",
                                              "Tree creation", "Tree removal"]
    create, stat = r.rate("File creation"), r.rate("File stat")
    assert create is not None and stat is not None
    assert (create.max, create.min, create.mean, create.stddev) == (439.763, 404.632, 422.661, 14.357)
    assert stat.mean == 2947.822
    read = r.rate("File read")
    assert read is not None and not read.ran  # zeros: mdtest ran no read phase (no -E / -e)


@pytest.mark.parametrize(("path", "version", "tasks", "nodes", "mean"), [
    (DAOS_34, "3.4.0+dev", 10, 3, 2943.686),  # rows with ':'
    (DAOS_40, "4.0.0", 10, 2, 2568.636),  # mdtest 4.0: rows without ':'
])
def test_real_daos_captures(path: Path, version: str, tasks: int, nodes: int, mean: float) -> None:
    r = parse_mdtest(path.read_text())
    assert (r.version, r.tasks, r.nodes, r.iterations) == (version, tasks, nodes, 1)
    create = r.rate("File creation")
    assert create is not None and create.mean == mean
    assert gate_mdtest(r, MdtestGate("creates", 2000)).status == "pass"
    # -C only: the stat phase printed as zeros has no data, it does not pass.
    assert gate_mdtest(r, MdtestGate("stats", 1)).status == "no-data"


@pytest.mark.parametrize(("gate", "status"), [
    (MdtestGate("creates", 422.661), "pass"),  # >= passes
    (MdtestGate("creates", 423), "fail"),
    (MdtestGate("stats", 2900), "pass"),
    (MdtestGate("stats", 3000), "fail"),
    (MdtestGate("reads", 1), "no-data"),
])
def test_gates_on_real_capture(gate: MdtestGate, status: str) -> None:
    assert gate_mdtest(parse_mdtest(BEEGFS.read_text()), gate).status == status


def test_mutated_values_parse_right() -> None:
    text = BEEGFS.read_text().replace(CREATE_ROW, "   File creation     :  12000.5  9000.25  10500.125  1.5")
    r = parse_mdtest(text)
    create = r.rate("File creation")
    assert create is not None and (create.max, create.min, create.mean) == (12000.5, 9000.25, 10500.125)
    assert gate_mdtest(r, MdtestGate("creates", 10000)).status == "pass"
    # A stonewall row (mdtest 3.3+) prints NA in the columns it has no value for.
    na = text.replace("   File stat ", "   File create (stonewall) :  NA  NA  1234.000  NA\n   File stat ", 1)
    stonewall = parse_mdtest(na).rate("File create (stonewall)")
    assert stonewall is not None and (stonewall.max, stonewall.mean) == (None, 1234.0)


@pytest.mark.parametrize(("row", "message"), [
    ("   File creation     :        nan        404.632        422.661         14.357", "non-finite"),
    ("   File creation     :        439.763        404.632        inf         14.357", "non-finite"),
    ("   File creation     :        439.763        404.632        -nan         14.357", "non-finite"),
    ("   File creation     :        439.763        404.632        422.661         Infinity", "non-finite"),
    ("   File creation     :        439.763        -404.632        422.661         14.357", "negative"),
    ("   File creation     :        439.763        404.632        422,661         14.357", "not a number"),
    ("   File creation     :        439.763        404.632        1e308         14.357", "not between"),
])
def test_refused(row: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_mdtest(BEEGFS.read_text().replace(CREATE_ROW, row))


def test_no_summary_and_cut() -> None:
    text = BEEGFS.read_text()
    with pytest.raises(ParseError, match="no 'SUMMARY rate"):
        parse_mdtest(text[:text.index("SUMMARY")])
    with pytest.raises(ParseError, match="no rows"):
        parse_mdtest(text[:text.index("   File creation")])
    with pytest.raises(ValueError, match="finite"):
        MdtestGate("creates", float("nan"))


def test_inspect_mdtest_cli(tmp_path: Path) -> None:
    ok = CliRunner().invoke(app, ["inspect", "mdtest", str(BEEGFS), "--json", "--min-creates", "400",
                                  "--min-stats", "2000"])
    assert ok.exit_code == 0, ok.output
    assert [g["status"] for g in json.loads(ok.stdout)["gates"]] == ["pass", "pass"]
    fail = CliRunner().invoke(app, ["inspect", "mdtest", str(DAOS_40), "--json", "--min-stats", "1"])
    assert fail.exit_code == 1 and json.loads(fail.stdout)["gates"][0]["status"] == "no-data"
    bad = tmp_path / "nan.txt"
    bad.write_text(BEEGFS.read_text().replace("422.661", "nan"))
    res = CliRunner().invoke(app, ["inspect", "mdtest", str(bad), "--json"])
    assert res.exit_code == 1 and "non-finite" in json.loads(res.stdout)["error"]["message"]
    opt = CliRunner().invoke(app, ["inspect", "mdtest", str(BEEGFS), "--json", "--min-creates", "nan"])
    assert opt.exit_code == 1 and "finite" in json.loads(opt.stdout)["error"]["message"]


def test_inspect_mdtest_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    res = CliRunner().invoke(app, ["inspect", "mdtest", str(fifo), "--json"])
    assert res.exit_code == 1
    assert "FIFO" in json.dumps(json.loads(res.stdout)["error"])
