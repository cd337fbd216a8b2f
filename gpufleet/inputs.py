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

import io
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from gpufleet.errors import InputError

MIB = 1 << 20

#: Default size limits in bytes per kind of input. Real stack files are a few KiB; real nccl-tests logs and
#: ``nvidia-smi -q -x`` captures of an 8-GPU node well under 1 MiB.
#: ``xml`` (``nvidia-smi -q -x``) is parsed whole by ElementTree, ~25x the text in memory for tiny elements: 4 MiB
#: keeps the parse under the 256 MiB every reader is held to (tests/test_bad_inputs_round2.py measures it).
LIMITS: dict[str, int] = {"yaml": 8 * MIB, "log": 64 * MIB, "xml": 4 * MIB}

#: Longest line :func:`iter_lines` yields, in characters. nccl-tests rows are ~150; a "line" longer than this
#: is not tool output (``/dev/zero``, a binary) and would otherwise grow one string up to the size limit.
MAX_LINE_CHARS = 1 * MIB

#: Largest value ``GPUFLEET_MAX_INPUT_MB`` / ``--max-input-mb`` may take (1 TiB): the limit must stay a number.
MAX_LIMIT_MB = 1 << 20

#: Environment variable (and ``gpufleet --max-input-mb``) that replaces every limit, in MiB.
LIMIT_ENV = "GPUFLEET_MAX_INPUT_MB"

#: Nodes a YAML document may expand to through aliases (the "billion laughs" bound); a 5 MB stack has ~1e6.
MAX_YAML_NODES = 2_000_000

#: Distinct nodes (scalars, lists, mappings, aliases) a YAML document may hold before it is built: each costs
#: ~600 bytes composed and constructed, so 300,000 keep the 256 MiB every reader is held to; a 10,000-host
#: inventory has ~200,000. Counted on the parser's event stream first (under a second for 8 MiB), because the
#: composed tree of an 8 MiB list of "- 1" lines took 1.1 GiB and 50 s.
MAX_YAML_EVENTS = 300_000
#: Texts shorter than this cannot hold MAX_YAML_EVENTS nodes (each takes at least 2 characters): not pre-scanned.
_SCAN_ABOVE = 2 * MAX_YAML_EVENTS

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: True when libyaml's C parser is used (PyYAML built with it); the pure-Python parser is ~40x slower.
C_LOADER = _Loader is not yaml.SafeLoader


def limit(kind: str) -> int:
    """The size limit in bytes for inputs of ``kind`` (``yaml`` or ``log``)."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if raw:
        try:
            mb = float(raw) if len(raw) <= 32 else math.nan
        except ValueError:
            mb = math.nan
        # A typo must not silently fall back to the default, nor 1e15 overflow into a traceback.
        if not (math.isfinite(mb) and 0 < mb <= MAX_LIMIT_MB):
            raise InputError.one(LIMIT_ENV, f"not a size in MiB between 0 and {MAX_LIMIT_MB}",
                                 f"set {LIMIT_ENV} to a number such as 64, or unset it", key=LIMIT_ENV,
                                 value=raw[:40], kind="invalid environment")
        return max(1, int(mb * MIB))
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


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int) -> InputError | None:
    """The error for anything but a regular file: a device reports size 0 and never ends (``/dev/zero``), a
    FIFO or socket blocks until someone writes; none has a size the limit could check before reading."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return InputError.one(str(path), "is a directory, not a file", "pass a file", kind="input error")
    what = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    return InputError.one(str(path), f"is {what}, not a regular file",
                          "save the output to a file first and pass that file", kind="input error")


def open_input(path: Path) -> IO[bytes]:
    """``path`` opened for reading, only when it is a regular file; every reader of user input opens it here.

    The type is checked before opening (a socket cannot be opened; a FIFO's open blocks) and again on the open
    descriptor (the path may have been swapped in between); the open itself is non-blocking for the same reason.
    """
    try:
        err = _not_regular(path, os.stat(path).st_mode)
        if err is not None:
            raise err
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise _open_error(path, e) from None
    try:
        err = _not_regular(path, os.fstat(fd).st_mode)
        if err is not None:
            raise err
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, kind: str) -> bytes:
    """The file's bytes, refusing a missing file, a directory, a device, FIFO or socket, or one above the
    ``kind`` limit."""
    lim = limit(kind)
    with open_input(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > lim:
                raise _too_big(path, size, lim)
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
    raw = open_input(path)
    size = os.fstat(raw.fileno()).st_size
    if size > lim:
        raw.close()
        raise _too_big(path, size, lim)
    seen = 0
    number = 0
    with io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None) as f:
        while True:
            line = f.readline(MAX_LINE_CHARS + 1)
            if not line:
                return
            number += 1
            seen += len(line)
            if seen > lim:
                raise _too_big(path, seen, lim)
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                raise InputError.one(str(path), f"line {number} is longer than {MAX_LINE_CHARS:,} characters",
                                     "pass the tool's text output (a binary or device file is not one)",
                                     key=f"line {number}", kind="input error")
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

#: Most digits an integer in YAML may have: every count, size and port gpufleet reads fits in 20. Python refuses
#: to convert more than 4300 digits (a ValueError, not a YAMLError) and a few thousand take noticeable time.
MAX_INT_DIGITS = 30


class BadNumber(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    digits = sum(c.isalnum() for c in text)
    if digits > MAX_INT_DIGITS:
        raise BadNumber(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)  # type: ignore[arg-type]


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    value = yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)  # type: ignore[arg-type]
    # ".inf", ".nan" and 1e999 are YAML floats but no setting gpufleet reads is infinite or not a number.
    if not math.isfinite(value):
        raise BadNumber(f"not a finite number ({str(loader.construct_scalar(node))[:40]})",  # type: ignore[arg-type]
                        node.start_mark)
    return value


YamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
YamlLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


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
    if isinstance(e, BadNumber):
        return InputError.one(file, problem, "write a plain number in the range the setting takes", key=where,
                              kind="invalid YAML")
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


_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)


def _check_node_count(text: str, file: str) -> None:
    """Refuse a document of more than MAX_YAML_EVENTS nodes from the event stream (memory: one event at a time).

    A syntax error found here is left to the loader, which reports it with its line and column.
    """
    count = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, _NODE_EVENTS):
                count += 1
                if count > MAX_YAML_EVENTS:
                    mark = event.start_mark
                    raise InputError.one(file, f"more than {MAX_YAML_EVENTS:,} values (lists, mappings, scalars)",
                                         "split the file; no stack or inventory gpufleet reads needs so many",
                                         key=f"line {mark.line + 1}" if mark else "-", kind="input too large")
    except yaml.YAMLError:
        return


def loads_yaml(text: str, file: str) -> Any:
    """Parse YAML text with :class:`YamlLoader`; an InputError (kind "YAML syntax error") on any problem."""
    if len(text) > _SCAN_ABOVE:
        _check_node_count(text, file)
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
