"""Ansible callback plugins gpufleet adds to every ansible-runner run (gpufleet.ansible_run.runner.runner_env)."""
