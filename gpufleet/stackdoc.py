"""Generate docs/stack-config.md from the stack model (gpufleet.spec): every key with type, default and example.

    python -m gpufleet.stackdoc > docs/stack-config.md      # tests/test_stackdoc.py checks it is current
"""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gpufleet.spec import _FIELDS, NAMESPACE, NOT_READ, RESERVED_NAMESPACES, SECRET_KEYS, ClusterSpec


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (a regex alternation must not split the row)."""
    return text.replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base = args[0]
        for meta in args[1:]:
            grammar = getattr(getattr(meta, "func", None), "grammar", None)
            if grammar:
                return f"string, {_cell(grammar)}"
        return _type_name(base)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        text = " or ".join(_type_name(a) for a in inner)
        return f"{text} (optional)" if len(inner) < len(args) else text
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping {_type_name(args[0])} → {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(annotation, str(annotation))


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "default_text" in extra:
        return f"`{extra['default_text']}`"
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        value = value.model_dump(exclude_defaults=True) if isinstance(value, BaseModel) else value
        return f"`{json.dumps(value)}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{json.dumps(field.default)}`"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        inner = _model_of(arg)
        if inner is not None:
            return inner
    return None


def _rows(model: type[BaseModel], prefix: str, out: list[str], top: bool = False) -> None:
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        if field.exclude or name == "stack":
            continue
        key = f"{NAMESPACE}:{_REVERSE[name]}" if top else f"{prefix}.{name}"
        example = f"`{json.dumps(field.examples[0])}`" if field.examples else ""
        type_name = _type_name(field.annotation)
        # pydantic moves a field's own Annotated[...] validators into field.metadata.
        grammars = [g for m in field.metadata if (g := getattr(getattr(m, "func", None), "grammar", None))]
        if grammars:
            type_name = f"{type_name}, {_cell(grammars[0])}"
        out.append(f"| `{key}` | {type_name} | {_default(field)} | {example} | "
                   f"{field.description or ''} |")
        sub = _model_of(field.annotation)
        if sub is not None:
            is_list = typing.get_origin(field.annotation) is list or "list" in _type_name(field.annotation)
            nested.append((f"{key}[]" if is_list else key, sub))
    for key, sub in nested:
        _rows(sub, key, out)


_REVERSE = {v: k for k, v in _FIELDS.items()}


def render() -> str:
    lines = [
        "# Stack configuration reference",
        "",
        "<!-- Generated from gpufleet/spec.py: `python -m gpufleet.stackdoc > docs/stack-config.md`. Do not edit. -->",
        "",
        "A stack file (`stacks/Pulumi.<stack>.yaml`) is Pulumi stack config; gpufleet reads the keys under the",
        f"`{NAMESPACE}:` namespace below. The stack name (from the file name) is a DNS-1123 label. Any other",
        f"`{NAMESPACE}:` key is refused (with the nearest known key as a suggestion), as are duplicate keys,",
        "values outside their grammar and a file that is not UTF-8 YAML within the size limit (README.md,",
        "\"Errors and exit codes\").",
        "",
        "| key | type | default | example | meaning |",
        "|---|---|---|---|---|",
    ]
    rows: list[str] = []
    _rows(ClusterSpec, "", rows, top=True)
    lines += rows
    lines += [
        "",
        "## Secrets",
        "",
        *[f"- `{NAMESPACE}:{k}`: set it with `pulumi config set --secret {NAMESPACE}:{k} ...`; a clear-text value "
          "in the file is refused." for k in SECRET_KEYS],
        "- Errors never show the value of a secret key, of a key with a secret-like name (`password`, `token`, "
        "`*_key`, ...), of an unknown key (a mistyped secret key holds the secret) or of a file that is not a stack "
        "file: they show `<redacted>`.",
        "",
        "## Keys that are refused with a reason",
        "",
        *[f"- `{NAMESPACE}:{k}`: {rule}. Fix: {fix}." for k, (rule, fix) in NOT_READ.items()],
        "",
        "## Reserved namespaces",
        "",
        f"`workloadNamespaces` may not name {', '.join(f'`{n}`' for n in RESERVED_NAMESPACES)} or any `kube-*` "
        "namespace: default-deny NetworkPolicies there would cut the cluster's own traffic.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
