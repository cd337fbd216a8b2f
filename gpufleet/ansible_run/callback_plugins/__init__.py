"""Ansible callback plugins gpufleet adds to every playbook run (gpufleet.ansible_run.runner.runner_env)."""
