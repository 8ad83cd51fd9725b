"""Java-style config names are the public surface, validated in one place: kipconsumer/config.py
(issue #39 item 3). Static checks that keep the clients free of config rules of their own:

- no client module (consumer, producer, share consumer, pipeline, task executor, asyncio wrappers)
  raises ``ConfigError`` or applies a default to a property
  (``setdefault("....ms", ...)``): that is config.py's job;
- the native clients take their settings object as is (``NativeConsumer(settings)``,
  ``ProducerCore(settings, ...)``, ``NativeShareConsumer(settings)``), never scalars picked from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kipconsumer"
CLIENTS = ["consumer.py", "producer.py", "share.py", "streams.py", "tasks.py", "aio.py", "_aio_share.py"]


def _tree(name: str) -> ast.Module:
    return ast.parse((PKG / name).read_text(), name)


@pytest.mark.parametrize("name", CLIENTS)
def test_clients_raise_no_config_error_and_apply_no_property_default(name: str) -> None:
    found = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "ConfigError":
                found.append(f"{node.lineno}: raise ConfigError")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "setdefault" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and "." in node.args[0].value):
            found.append(f"{node.lineno}: {node.func.attr}({node.args[0].value!r})")
    assert not found, f"config rules outside config.py in {name}:\n" + "\n".join(found)


NATIVE_CLIENTS = [("consumer.py", "NativeConsumer"), ("producer.py", "ProducerCore"),
                  ("share.py", "NativeShareConsumer")]


@pytest.mark.parametrize(("name", "native"), NATIVE_CLIENTS)
def test_native_clients_take_their_settings_object(name: str, native: str) -> None:
    calls = [node for node in ast.walk(_tree(name)) if isinstance(node, ast.Call)
             and ((isinstance(node.func, ast.Name) and node.func.id == native)
                  or (isinstance(node.func, ast.Attribute) and node.func.attr == native))]
    assert calls, f"{name} does not create its {native}"
    for call in calls:
        first = call.args[0] if call.args else None
        assert isinstance(first, ast.Name) and not call.keywords and len(call.args) <= 3, (
            f"{name}:{call.lineno}: {native}() must take the settings object (and the serializers), "
            f"not values picked from it")
