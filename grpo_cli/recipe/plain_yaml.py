"""Read a plain recipe with OmegaConf's YAML rules, without importing OmegaConf.

Importing OmegaConf (its interpolation grammar, the ANTLR runtime) is about a tenth of `grpo validate`,
and most recipes use none of what it adds: no `extends`, no `${...}`, no command-line overrides. Such a
recipe is read here and gives the dict `OmegaConf.to_container(OmegaConf.create(text), resolve=True)`
gives: the same PyYAML loader (libyaml's when installed, as OmegaConf 2.4 uses), the same scalar rules
(floats such as `1e-5` without a dot; dates stay strings). Whatever this reader is not sure of returns
None and OmegaConf reads the file instead, reporting any problem exactly as before: anchors and aliases,
merge keys, duplicate keys, tags other than the plain ones, keys that are not strings, `???`, very large
documents (OmegaConf's node limit), and every error. tests/recipe/test_plain_yaml.py holds both readers to the
same result.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader with OmegaConf's implicit resolvers (omegaconf/_yaml.py)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        """^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\\.[0-9_]*
    |[-+]?\\.(?:inf|Inf|INF)
    |\\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in _Loader.yaml_implicit_resolvers.items()
}

_TAG = "tag:yaml.org,2002:"
_SCALARS = frozenset(_TAG + name for name in ("str", "int", "float", "bool", "null"))
_MAX_NODES = 10_000  # OmegaConf's default limit on a document's nodes


def plain_recipe(path: Path) -> dict[str, Any] | None:
    """The recipe at `path` as a plain dict, or None when OmegaConf must read it (or report what is wrong)."""
    if "OMEGACONF_MAX_YAML_EXPANDED_NODES" in os.environ:
        return None
    if not path.is_file():  # missing, a directory, a device or a pipe: the full reader says which
        return None
    try:
        data = path.read_bytes()
        text = data.decode("utf-8") if b"\x00" not in data[:8192] else ""
    except (OSError, UnicodeDecodeError):
        return None
    if not text.strip() or "${" in text or "???" in text:
        return None
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if not isinstance(node, yaml.MappingNode) or not _is_plain(node):
                return None
            recipe = loader.construct_document(node)
        finally:
            loader.dispose()
    except Exception:  # a YAML error (or anything odd): OmegaConf reads it and says what is wrong
        return None
    if not isinstance(recipe, dict) or "extends" in recipe:
        return None
    return recipe


def _is_plain(root: yaml.Node) -> bool:
    """No aliases, merge keys, duplicate keys, non-string keys or unusual tags, and under OmegaConf's node limit."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen or len(seen) >= _MAX_NODES:
            return False  # a node reached twice is an alias
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.tag not in _SCALARS:
                return False
        elif isinstance(node, yaml.SequenceNode):
            if node.tag != _TAG + "seq":
                return False
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            keys = [key.value for key, _ in node.value]
            if node.tag != _TAG + "map" or len(set(keys)) != len(keys) or any(
                    not isinstance(key, yaml.ScalarNode) or key.tag != _TAG + "str" for key, _ in node.value):
                return False
            for key, value in node.value:
                stack += (key, value)
        else:
            return False
    return True
