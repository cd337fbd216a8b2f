"""Run a scenario's playbook through gpufleet's own runner, the one `gpufleet converge` and `gpufleet drift` use, and
keep what gpufleet says about the run: a converge's or check's result (``RunResult.to_json()``: changes per host,
failures with their messages, the notices) with the closing summary as printed, or a drift check's report (site.yml's
check run as ``gpufleet drift`` builds it). Molecule plays call it where a verifier asserts on gpufleet's account of
a run rather than on ansible's (molecule/audit/adopt.yml: the replaced sources named in the run's summary).

usage: python gpufleet_run.py {converge,check,drift} INVENTORY PLAYBOOK OUT.json [--limit P] [--extra-vars JSON]
Exit 0 once OUT.json is written, whatever the run did (the verifier judges it); 1 when no run could be made.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from rich.console import Console

from gpufleet.ansible_run import run_playbook
from gpufleet.ansible_run.display import summary
from gpufleet.drift.runner import Target, check_drift


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("converge", "check", "drift"))
    parser.add_argument("inventory", type=Path)
    parser.add_argument("playbook", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit")
    parser.add_argument("--extra-vars", default="{}", help="JSON object")
    args = parser.parse_args(argv)
    extravars = json.loads(args.extra_vars)
    if args.mode == "drift":
        report, run = check_drift(Target(args.inventory), limit=args.limit, playbook=args.playbook.resolve(),
                                  extravars=extravars)
        data = {"report": report.to_json(), "exit_code": report.exit_code, "run": run.to_json()}
    else:
        result = run_playbook(args.playbook.resolve(), args.inventory, limit=args.limit, extravars=extravars,
                              check=args.mode == "check", diff=True, live=False)
        text = io.StringIO()
        Console(file=text, width=1000, color_system=None, force_terminal=False).print(summary(result))
        data = {"run": result.to_json(), "summary": text.getvalue()}
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
