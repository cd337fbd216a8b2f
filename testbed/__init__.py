"""Test doubles of NVIDIA's software, kept out of the product package ``gpufleet``.

``testbed/simulator/`` holds the GPU simulator's scripts (``nvidia-smi`` and daemon stand-ins) and
``testbed.fixture_repo`` builds the signed APT repository that ships them in packages named as NVIDIA's.
Only the local sandbox backend (``gpufleet.sandbox``) imports this package; a test keeps it that way.
"""
