"""Reading untrusted input files: bounded in size, strict in encoding and YAML, errors instead of tracebacks.

Stack files, inventories and tool outputs come from users, other teams and broken machines. Everything
gpufleet reads from them goes through here:

* a size limit per kind of input (:data:`LIMITS`, documented in README.md "Input limits"); ``gpufleet
  --max-input-mb N`` or ``GPUFLEET_MAX_INPUT_MB=N`` raises it;
* UTF-8 only (a stack file in Latin-1 is an error naming the byte offset, not a traceback);
* YAML through libyaml's C parser when PyYAML has it (a 5 MB stack: seconds, not a minute), refusing
  duplicate keys (a second ``gpufleet:lock:`` silently replacing the first) and alias bombs (a document whose
  aliases expand to more than :data:`MAX_YAML_NODES` nodes), and reading Ansible's ``!unsafe`` tag as a
  plain string (gpufleet writes inventories with it, :func:`dump_unsafe_yaml`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpufleet.errors import InputError

MIB = 1 << 20

#: Default size limits in bytes per kind of input. Real stack files are a few KiB; real nccl-tests logs and
#: ``nvidia-smi -q -x`` captures of an 8-GPU node well under 1 MiB.
LIMITS: dict[str, int] = {"yaml": 8 * MIB, "log": 64 * MIB}

#: Environment variable (and ``gpufleet --max-input-mb``) that replaces every limit, in MiB.
LIMIT_ENV = "GPUFLEET_MAX_INPUT_MB"

#: Nodes a YAML document may expand to through aliases (the "billion laughs" bound); a 5 MB stack has ~1e6.
MAX_YAML_NODES = 2_000_000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: True when libyaml's C parser is used (PyYAML built with it); the pure-Python parser is ~40x slower.
C_LOADER = _Loader is not yaml.SafeLoader


def limit(kind: str) -> int:
    """The size limit in bytes for inputs of ``kind`` (``yaml`` or ``log``)."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if raw:
        try:
            mb = float(raw)
        except ValueError:
            mb = 0
        if mb > 0 and mb == mb and mb != float("inf"):
            return int(mb * MIB)
    return LIMITS[kind]


def _too_big(path: Path | str, size: int, lim: int) -> InputError:
    return InputError.one(
        str(path), f"input is larger than the {round(lim / MIB, 3):g} MiB limit ({size} bytes or more)",
        f"pass a smaller file, or raise the limit: gpufleet --max-input-mb N ... (or {LIMIT_ENV}=N)",
        kind="input too large")


def _open_error(path: Path, e: OSError) -> InputError:
    if isinstance(e, FileNotFoundError):
        return InputError.one(str(path), "file not found", "check the path", kind="input error")
    if isinstance(e, IsADirectoryError) or path.is_dir():
        return InputError.one(str(path), "is a directory, not a file", "pass a file", kind="input error")
    return InputError.one(str(path), f"cannot read: {e.strerror or e}", "check the file's permissions",
                          kind="input error")


def read_bytes(path: Path, kind: str) -> bytes:
    """The file's bytes, refusing a missing file, a directory or one above the ``kind`` limit."""
    lim = limit(kind)
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        with path.open("rb") as f:
            data = f.read(lim + 1)
    except OSError as e:
        raise _open_error(path, e) from None
    if len(data) > lim:
        raise _too_big(path, len(data), lim)
    return data


def decode(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError.one(file, f"not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})",
                             "save the file as UTF-8 text", kind="input error") from None


def read_text(path: Path, kind: str) -> str:
    """The file as UTF-8 text, within the ``kind`` size limit."""
    return decode(read_bytes(path, kind), str(path))


def iter_lines(path: Path, kind: str = "log") -> Iterator[str]:
    """The file's lines (without line ends), streamed: memory stays bounded by the longest line.

    The size limit is checked before reading (regular files) and while reading (pipes). Bytes that are not
    UTF-8 become U+FFFD: tool output is matched by patterns, a stray byte must not stop a 100 MB log.
    """
    lim = limit(kind)
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        size = path.stat().st_size
        if size > lim:
            raise _too_big(path, size, lim)
        f = path.open("r", encoding="utf-8", errors="replace", newline=None)
    except OSError as e:
        raise _open_error(path, e) from None
    seen = 0
    with f:
        for line in f:
            seen += len(line)
            if seen > lim:
                raise _too_big(path, seen, lim)
            yield line.rstrip("\n")


class _Unsafe(str):
    """A string Ansible must never template (dumped as ``!unsafe``)."""


def _represent_unsafe(dumper: yaml.SafeDumper, data: _Unsafe) -> yaml.ScalarNode:
    style = "|" if "\n" in data else "'"
    return dumper.represent_scalar("!unsafe", str(data), style=style)


class UnsafeDumper(yaml.SafeDumper):
    """Dumps string values as ``!unsafe`` (mapping keys stay plain: host and group names are validated)."""


UnsafeDumper.add_representer(_Unsafe, _represent_unsafe)


def _mark_unsafe(data: Any) -> Any:
    if isinstance(data, str):
        return _Unsafe(data)
    if isinstance(data, dict):
        return {k: _mark_unsafe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_mark_unsafe(v) for v in data]
    return data


def dump_unsafe_yaml(data: Any) -> str:
    """YAML for Ansible in which every string value is tagged ``!unsafe``: data, never a template.

    A stack value such as ``{{ lookup('pipe', 'id') }}`` then reaches Ansible as that literal text.
    """
    return yaml.dump(_mark_unsafe(data), Dumper=UnsafeDumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True)


class YamlLoader(_Loader):  # type: ignore[valid-type,misc]
    """Safe loader: refuses duplicate keys and alias bombs, reads ``!unsafe`` as a plain string."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found an unhashable key ({type(key).__name__})", key_node.start_mark) from None
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    f"duplicate key {key!r} (first at line {first.start_mark.line + 1}; YAML keeps only the "
                    "last, silently)", first.start_mark, "found again here", key_node.start_mark)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    #: Walk the node graph for alias expansion; loads_yaml turns it off for text without anchors (no aliases).
    check_aliases = True

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        if self.check_aliases:
            _check_expansion(node)
        return self.construct_document(node)


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


YamlLoader.add_constructor("!unsafe", _construct_unsafe)


class AliasBomb(yaml.YAMLError):
    pass


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand to more than MAX_YAML_NODES nodes (linear in distinct nodes)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            sizes[nid] = total
            on_path.discard(nid)
            if total > MAX_YAML_NODES:
                raise AliasBomb(f"the document expands to more than {MAX_YAML_NODES:,} nodes through aliases "
                                f"(near line {node.start_mark.line + 1}); refusing it (an alias bomb?)")
            continue
        if nid in sizes or nid in on_path:
            continue
        on_path.add(nid)
        stack.append((node, True))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((c, False) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((c, False) for pair in node.value for c in pair)


def _yaml_error(file: str, e: yaml.YAMLError) -> InputError:
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "-"
    problem = str(getattr(e, "problem", None) or e)
    context = getattr(e, "context", None)
    if isinstance(e, AliasBomb):
        return InputError.one(file, problem, "write the values out instead of nesting aliases", kind="invalid YAML")
    if isinstance(e, yaml.constructor.ConstructorError):
        if context and str(context).startswith("duplicate key"):
            return InputError.one(file, str(context), "remove one of the two entries", key=where,
                                  kind="invalid YAML")
        return InputError.one(file, f"{problem} ({context})" if context else problem,
                              "remove the tag or write a plain value", key=where, kind="invalid YAML")
    message = f"{problem} ({context})" if context else problem
    return InputError.one(file, message, "fix the YAML syntax at that place", key=where, kind="YAML syntax error")


def loads_yaml(text: str, file: str) -> Any:
    """Parse YAML text with :class:`YamlLoader`; an InputError (kind "YAML syntax error") on any problem."""
    loader = YamlLoader(text)
    # An alias needs an anchor ("&name"): text without "&" cannot expand, so the graph walk is skipped.
    loader.check_aliases = "&" in text
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise _yaml_error(file, e) from None
    except RecursionError:
        raise InputError.one(file, "YAML nested too deeply", "flatten the document",
                             kind="YAML syntax error") from None
    finally:
        loader.dispose()


def load_yaml(path: Path) -> Any:
    """Read and parse a YAML file within the size limit (UTF-8, no duplicate keys, bounded aliases)."""
    return loads_yaml(read_text(path, "yaml"), str(path))
