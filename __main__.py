"""Pulumi entry point (Pulumi.yaml runtime: python). The program lives in gpufleet.infra.program."""

from gpufleet.infra.program import main

main()
