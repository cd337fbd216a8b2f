"""Code that also runs on managed hosts: Ansible ships these files to them as module_utils.

``ansible/module_utils/gpufleet_<name>.py`` links to ``<name>.py`` here (``module_utils`` in ansible/ansible.cfg),
so the modules and the Python package run one copy. Each file imports only the standard library (a module's
payload carries nothing else; tests/test_module_utils.py checks it) and never imports a sibling.
"""
