"""Policy pack entry: ``pulumi preview --policy-pack policy/``.

Constructing PolicyPack starts the policy analyzer server and blocks, so it happens only here; the
policies themselves live in ``gpufleet_policies`` and are importable (and tested) without a server.
"""

from gpufleet_policies import build_pack

build_pack()
