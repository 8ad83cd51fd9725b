"""Every KafkaError says what to do about it: ``.category`` (KIP-1050's categories), with ``.retriable``
equal to ``category == "retriable"``; the mapping from classes, librdkafka's flags and error names lives in
one place (``kipconsumer.errors.category_of``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

import kipconsumer.spark.errors
import kipconsumer.testing
from kipconsumer import KafkaConsumer, KafkaProducer, TopicPartition, errors
from kipconsumer.broker import EmbeddedBroker
from kipconsumer.errors import CATEGORIES, KafkaError, category_of

#: what each class of kipconsumer.errors means, written out independently of the mapping under test
EXPECTED = {
    "KafkaError": "fatal",
    "ConfigError": "invalid_configuration",
    "InvalidTopicError": "invalid_configuration",
    "KafkaTimeoutError": "retriable",
    "TransactionBlockedError": "retriable",
    "CommitFailedError": "abortable",
    "InvalidOffsetError": "invalid_configuration",
    "NoOffsetForPartitionError": "invalid_configuration",
    "OffsetOutOfRangeError": "invalid_configuration",
    "RebalanceInProgressError": "retriable",
    "WakeupError": "retriable",
    "TaskTimeoutError": "fatal",
    "IllegalStateError": "fatal",
    "ConcurrentAccessError": "fatal",
    "ProducerFencedError": "application_recoverable",
    "TransactionAbortableError": "abortable",
    "TransactionOutcomeUnknownError": "application_recoverable",
    "ProcessingError": "fatal",
    "SerializationError": "fatal",
    "RecordDeserializationError": "fatal",
    "UnsupportedFeatureError": "invalid_configuration",
    "UnsupportedVersionError": "invalid_configuration",
    "ShareGroupsUnsupportedError": "invalid_configuration",
    "AuthenticationError": "invalid_configuration",
    "AuthorizationError": "invalid_configuration",
    "TopicAuthorizationError": "invalid_configuration",
    "GroupAuthorizationError": "invalid_configuration",
    "TransactionalIdAuthorizationError": "invalid_configuration",
    "ClusterAuthorizationError": "invalid_configuration",
}


def _subclasses(cls: type[KafkaError]) -> set[type[KafkaError]]:
    out = set()
    for sub in cls.__subclasses__():
        out.add(sub)
        out |= _subclasses(sub)
    return out


def _make(cls: type[KafkaError]) -> KafkaError:
    params = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, object] = {}
    for name in ("topic", "partition", "offset"):  # ProcessingError's required keywords
        if name in params and params[name].default is inspect.Parameter.empty:
            kwargs[name] = "t" if name == "topic" else 0
    return cls("message", **kwargs)


def test_every_error_class_has_its_category_and_retriable_agrees() -> None:
    assert kipconsumer.spark.errors and kipconsumer.testing  # their error classes are registered too
    classes = {KafkaError} | _subclasses(KafkaError)
    defined = {cls.__name__ for cls in classes if cls.__module__ == "kipconsumer.errors"}
    assert defined == set(EXPECTED)  # a new error class needs its row above
    for cls in classes:
        err = _make(cls)
        assert err.category in CATEGORIES, cls
        assert err.retriable is (err.category == "retriable"), cls
        if cls.__module__ == "kipconsumer.errors":
            assert err.category == EXPECTED[cls.__name__], cls


@pytest.mark.parametrize(("table", "category"), [
    (errors.APPLICATION_RECOVERABLE_CODES, "application_recoverable"),
    (errors.INVALID_CONFIGURATION_CODES, "invalid_configuration"),
    (errors.ABORTABLE_CODES, "abortable"),
    (errors.RETRIABLE_CODES, "retriable"),
])
def test_every_code_the_mapping_knows_gives_its_category(table: frozenset[str], category: str) -> None:
    assert table
    for code in table:
        err = KafkaError(f"failed: {code}", code=code)
        assert err.category == category, code
        assert err.retriable is (category == "retriable"), code
        assert category_of(code) == category
    tables = [errors.APPLICATION_RECOVERABLE_CODES, errors.INVALID_CONFIGURATION_CODES,
              errors.ABORTABLE_CODES, errors.RETRIABLE_CODES]
    assert sum(len(t) for t in tables) == len(frozenset().union(*tables))  # a code in one table only


def test_librdkafka_flags_decide_what_the_name_does_not() -> None:
    assert category_of("_SOMETHING_NEW") == "fatal"
    assert category_of("_SOMETHING_NEW", retriable=True) == "retriable"
    assert category_of("_SOMETHING_NEW", abortable=True) == "abortable"
    assert category_of("_SOMETHING_NEW", fatal=True) == "fatal"
    # fenced stays recoverable by a new client even when librdkafka raised it as fatal
    assert category_of("PRODUCER_FENCED", fatal=True) == "application_recoverable"
    assert category_of("INVALID_TXN_STATE", fatal=True) == "fatal"
    # retriable=False rules "retriable" out (a record purged by close() is not to be sent again as is)
    assert category_of("_MSG_TIMED_OUT", retriable=False) == "fatal"
    assert category_of("_PURGE_QUEUE", retriable=False) == "abortable"
    # a class with its own category keeps it over the name
    assert errors.RebalanceInProgressError("x", code="ILLEGAL_GENERATION").category == "retriable"
    assert errors.CommitFailedError("x", code="ILLEGAL_GENERATION").category == "abortable"
    assert errors.TransactionAbortableError("x", code="_TXN_OUTCOME_UNKNOWN").category == "abortable"


def test_a_contradicting_or_unknown_category_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"category must be one of retriable, abortable, application_"
                                         r"recoverable, invalid_configuration, fatal, got 'maybe'"):
        KafkaError("x", category="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"retriable=True contradicts category='fatal'"):
        KafkaError("x", retriable=True, category="fatal")
    err = KafkaError("x", category="abortable")
    assert err.category == "abortable" and not err.retriable
    with pytest.raises(AttributeError):
        err.retriable = True  # type: ignore[misc]  # derived from the category, not set apart


def _raises(call: Callable[[], object]) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value


def test_errors_raised_by_the_native_clients_carry_their_category() -> None:
    """Errors made by the Cython layer (librdkafka's error names and flags) are categorized too."""
    with EmbeddedBroker(num_brokers=1) as broker:
        broker.create_topic("cat", 1)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap_servers}) as p:
            err = _raises(lambda: p.send("cat", value=b"v", partition=5).result(10))
            assert (err.code, err.category) == ("_UNKNOWN_PARTITION", "invalid_configuration")
            err = _raises(lambda: p.begin_transaction())  # no transactional.id
            assert isinstance(err, errors.IllegalStateError) and err.category == "fatal"
        broker.set_down(1)
        txn_conf = {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "cat-tx"}
        with KafkaProducer(txn_conf) as p:
            err = _raises(lambda: p.init_transactions(timeout=0.5))
            assert err.category == "retriable" and err.retriable
        with KafkaConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "cat-g",
                            "enable.auto.commit": False}) as c:
            err = _raises(lambda: c.committed([TopicPartition("cat", 0)], timeout=0.5))
            assert err.category == "retriable" and isinstance(err, errors.KafkaTimeoutError)
