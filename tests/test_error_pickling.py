"""Every kipconsumer error survives pickle, copy and deepcopy with its type, message, code and fields
(issue #38 U1): errors cross process boundaries (a Pipeline in a worker process, Spark executors,
concurrent.futures and multiprocessing pools)."""

from __future__ import annotations

import concurrent.futures
import copy
import inspect
import multiprocessing
import pickle
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

import kipconsumer.errors as errors
import kipconsumer.spark.errors as spark_errors
import kipconsumer.testing._errors as testing_errors
import kipconsumer.testing.spark_connector as spark_connector
from kipconsumer import spark_cluster, spark_env

_MODULES: tuple[ModuleType, ...] = (errors, spark_errors, testing_errors, spark_connector, spark_env,
                                    spark_cluster)

#: errors whose constructor takes fields besides the message and ``code`` / ``retriable``
_SAMPLES: dict[type[BaseException], Callable[[], BaseException]] = {
    errors.ProcessingError: lambda: errors.ProcessingError("bad record", topic="in", partition=3, offset=42),
    errors.RecordDeserializationError: lambda: errors.RecordDeserializationError(
        "cannot decode", topic="in", partition=3, offset=42, origin="value"),
    errors.TopicAuthorizationError: lambda: errors.TopicAuthorizationError(
        "denied", code="TOPIC_AUTHORIZATION_FAILED", topics=["a", "b"]),
    errors.GroupAuthorizationError: lambda: errors.GroupAuthorizationError("denied", group_id="g"),
}


def _error_classes() -> Iterator[type[BaseException]]:
    seen: set[type[BaseException]] = set()
    for mod in _MODULES:
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            ours = obj.__module__.startswith("kipconsumer")
            if issubclass(obj, BaseException) and ours and obj not in seen:
                seen.add(obj)
                yield obj


def _sample(cls: type[BaseException]) -> BaseException:
    if cls in _SAMPLES:
        e = _SAMPLES[cls]()
    elif issubclass(cls, errors.KafkaError):
        e = cls("something failed", code="_SOME_CODE", retriable=True)  # type: ignore[call-arg]
    else:
        e = cls("something failed")
    if sys.version_info >= (3, 11):
        e.add_note("a note added on the way up")
    else:  # what add_note() does (the wheel tier runs this module on 3.10 too)
        e.__notes__ = ["a note added on the way up"]
    return e


def _same(a: BaseException, b: BaseException) -> None:
    assert type(b) is type(a)
    assert str(b) == str(a) and b.args == a.args
    assert vars(b) == vars(a)  # code, retriable and every field, the notes too
    if isinstance(a, errors.KafkaError):
        assert isinstance(b, errors.KafkaError)
        assert (b.code, b.retriable) == (a.code, a.retriable)


CLASSES = sorted(_error_classes(), key=lambda c: c.__qualname__)


def test_the_modules_hold_the_errors_the_probe_named() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"ProcessingError", "RecordDeserializationError", "TopicAuthorizationError", "DataLossError",
            "KafkaClusterError", "SparkConnectorError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_error_round_trips(cls: type[BaseException], how: str) -> None:
    e = _sample(cls)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1) if how == "pickle" else (None,):
        if how == "pickle":
            back = pickle.loads(pickle.dumps(e, protocol=protocol))
        else:
            back = copy.copy(e) if how == "copy" else copy.deepcopy(e)
        _same(e, back)


def _raise_processing_error(offset: int) -> None:
    raise errors.ProcessingError(f"process() raised for in-0@{offset}", topic="in", partition=0,
                                 offset=offset)


def test_a_processing_error_in_a_process_pool_reaches_the_parent_typed() -> None:
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        fut = pool.submit(_raise_processing_error, 7)
        with pytest.raises(errors.ProcessingError) as info:
            fut.result(timeout=120)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("in", 0, 7)
    assert str(info.value) == "process() raised for in-0@7"
