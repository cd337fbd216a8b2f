"""The power-limit grammar: the one parser of a GPU power limit, for every layer that reads one.

A power limit is, exactly (case-sensitive, no spaces, no unit):

=============  ==========================================================  ==========
form           meaning                                                     example
=============  ==========================================================  ==========
``<watts>``    whole watts (a YAML integer or a string of digits)          ``700``
``<n>%``       whole percent of the GPU's default limit, rounded to watts  ``90%``
``default``    the GPU's default limit (what it boots with)                ``default``
``min``        the lowest limit the GPU accepts                            ``min``
``max``        the highest limit the GPU accepts                           ``max``
=============  ==========================================================  ==========

Everything else is refused with the same message everywhere: fractions (``650.5``, ``92.5%``: boards publish
whole-watt ranges and fleets budget power in whole watts), units and spaces (``700 W``), other spellings
(``MAX``). The result must lie in the GPU's [min, max] range; the catalog's range is checked before anything is
touched (lock rules), the range the GPU itself reports when the limit is applied (gpu_settings module).

Used by the stack file (gpufleet.spec), the lock rules (gpufleet.lock.rules via GpuModel.resolve_power_limit),
the gpu_settings role's preflight (the ``gpufleet_power_limit_problem`` filter) and the gpu_settings module
(``ansible.module_utils.gpufleet_power_limit``). This file is the only copy: ``ansible/module_utils/`` and
``ansible/filter_plugins/`` link to it, so it imports nothing outside the standard library (it runs on managed
hosts inside the module's payload) and carries the filter plugin class the role's preflight loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

#: The accepted forms, in the words every error message uses.
GRAMMAR = "whole watts (700), a whole percentage of the default limit (90%), 'default', 'min' or 'max'"

Kind = Literal["watts", "percent", "default", "min", "max"]

_WATTS = re.compile(r"[1-9][0-9]*")
_PERCENT = re.compile(r"([1-9][0-9]*)%")
_KEYWORDS: tuple[Kind, ...] = ("default", "min", "max")


class PowerLimitError(ValueError):
    """A power limit that does not parse, or resolves outside the GPU's range; ``str()`` says which."""


@dataclass(frozen=True)
class PowerLimit:
    """A parsed power limit; ``str()`` is its canonical text (what the inventory and the module receive)."""

    kind: Kind
    number: int | None = None

    def __str__(self) -> str:
        if self.kind == "watts":
            return str(self.number)
        if self.kind == "percent":
            return f"{self.number}%"
        return self.kind

    def watts(self, *, default: float | None, minimum: float | None, maximum: float | None,
              where: str = "the GPU") -> float:
        """Watts this limit means for a GPU with these limits; PowerLimitError when outside [minimum, maximum]."""
        if self.kind == "watts":
            assert self.number is not None
            watts = float(self.number)
        else:
            base = {"percent": default, "default": default, "min": minimum, "max": maximum}[self.kind]
            name = "default" if self.kind == "percent" else self.kind
            if base is None:
                raise PowerLimitError(
                    f"power limit {str(self)!r} needs the {name} limit, which {where} does not report")
            watts = float(base) if self.kind != "percent" else float(round(float(base) * (self.number or 0) / 100))
        if minimum is not None and maximum is not None and not minimum <= watts <= maximum:
            raise PowerLimitError(
                f"power limit {str(self)!r} = {watts:g} W is outside {where}'s range {minimum:g}-{maximum:g} W")
        return watts


def parse_power_limit(value: Any) -> PowerLimit:
    """The PowerLimit ``value`` spells; PowerLimitError naming the value and the accepted forms otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= 1:
            return PowerLimit("watts", value)
    elif isinstance(value, str):
        if _WATTS.fullmatch(value):
            return PowerLimit("watts", int(value))
        m = _PERCENT.fullmatch(value)
        if m:
            return PowerLimit("percent", int(m.group(1)))
        for kind in _KEYWORDS:
            if value == kind:
                return PowerLimit(kind)
    raise PowerLimitError(f"power limit {value!r} is not {GRAMMAR}")


def canonical_power_limit(value: Any) -> str:
    """The canonical text of a valid power limit (``700`` for the integer 700); PowerLimitError otherwise."""
    return str(parse_power_limit(value))


def power_limit_problem(value: Any) -> str:
    """Why ``value`` is not a power limit, or "" when it is (the role preflight asserts on this)."""
    try:
        parse_power_limit(value)
    except PowerLimitError as e:
        return str(e)
    return ""


class FilterModule:
    """Ansible filters (ansible/filter_plugins/gpufleet_power_limit.py links here)."""

    def filters(self) -> dict[str, Any]:
        return {"gpufleet_power_limit_problem": power_limit_problem}
