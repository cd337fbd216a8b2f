"""Ansible inventory hand-off: stack outputs (or the sandbox's containers) -> ``inventories/<stack>/``."""

from gpufleet.inventory.writer import INVENTORIES_DIR, hosts_from_outputs, inventory_dir, write_inventory

__all__ = ["INVENTORIES_DIR", "hosts_from_outputs", "inventory_dir", "write_inventory"]
