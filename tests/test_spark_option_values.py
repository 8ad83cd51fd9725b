"""Hostile values of the ``kipkafka`` options (issue #38 U5, S1), without Spark: every one is a
``ConfigError`` naming the option and the allowed values, never another exception or a value
silently taken as something else; secrets stay out of ``repr()`` but travel to the executors."""

from __future__ import annotations

import copy
import pickle

import pytest

from kipconsumer.errors import ConfigError
from kipconsumer.spark.options import ReadOptions, WriteOptions

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}
BASE = {**BS, "subscribe": "t"}
INT64_MAX = 2**63 - 1
LONG_RANGE = ">= -2 and <= 9223372036854775807"


def read(streaming: bool = True, **options: str) -> ReadOptions:
    return ReadOptions.parse({**BS, **options}, streaming)


@pytest.mark.parametrize(("value", "match"), [
    ('{"t": [1e400]}', r"partition inf of topic 't' must be an integer in 0\.\.2147483647"),
    ("[" * 100_000 + "]" * 100_000, r"option assign must be JSON like .*\(200000 characters\)"),
    ('{"t": [-1]}', r"partition -1 of topic 't' must be an integer in 0\.\.2147483647"),
    ('{"t": [1.7]}', r"partition 1\.7 of topic 't'"),
    ('{"t": [true]}', r"partition True of topic 't'"),
    ('{"t": ["3"]}', r"partition '3' of topic 't'"),
    ('{"t": [2147483648]}', r"partition 2147483648 of topic 't'"),
    ('{"t": [99999999999999999999999]}', r"partition 99999999999999999999999 of topic 't'"),
    ('{"": [0]}', r"option assign: invalid topic name '': 1\.\.249 characters"),
    ('{"bad topic!": [0]}', r"option assign: invalid topic name 'bad topic!'"),
    ('{"t": 0}', r"option assign: topic 't' must map to a list"),
    ('["t"]', r"option assign must be a JSON object"),
    ('{"t": [0], "t": [1]}', r"option assign: the key 't' is given twice"),
    ('{"t": [' + "9" * 5000 + "]}", r"option assign must be JSON like"),
])
def test_bad_assign_is_a_config_error(value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        read(assign=value)


def test_assign_takes_each_partition_once() -> None:
    assert read(assign='{"b": [1, 0, 1], "a": [2]}').assign == (("a", 2), ("b", 0), ("b", 1))


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
@pytest.mark.parametrize(("value", "match"), [
    ('{"t": {"-1": 5}}', r"partition '-1' of topic 't' must be a partition number in 0\.\.2147483647"),
    ('{"t": {"00": 5}}', r"partition '00' .*no sign, leading zero or space"),
    ('{"t": {"0": 5, "00": 7}}', r"partition '00' of topic 't'"),
    ('{"t": {"0": 5, "0": 7}}', r"the key '0' is given twice"),
    ('{"t": {" 1": 5}}', r"partition ' 1' of topic 't'"),
    ('{"t": {"\u0663": 5}}', r"partition '\u0663' of topic 't'"),
    ('{"t": {"9999999999999999999999": 1}}', r"partition '9999999999999999999999'"),
    ('{"t": {"0": 99999999999999999999999}}', rf"the value of t-0 must be an int {LONG_RANGE}"),
    ('{"t": {"0": 9223372036854775808}}', rf"the value of t-0 must be an int {LONG_RANGE}"),
    ('{"t": {"0": 1e400}}', r"the value of t-0 must be an int"),
    ('{"bad topic!": {"0": 1}}', r"invalid topic name 'bad topic!'"),
    ("{" * 50_000, r"must be JSON like .*\(50000 characters\)"),
])
def test_bad_offsets_json_is_a_config_error(option: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=f"option {option}.*{match}"):
        read(streaming=(option == "startingOffsets"), subscribe="t", **{option: value})


def test_offsets_json_up_to_the_largest_long_is_taken() -> None:
    spec = f'{{"t": {{"0": {INT64_MAX}, "2147483647": -1}}}}'
    ending = read(False, subscribe="t", endingOffsets=spec).ending
    assert ending == {("t", 0): INT64_MAX, ("t", 2**31 - 1): -1}


@pytest.mark.parametrize("option", ["startingOffsetsByTimestamp", "endingOffsetsByTimestamp"])
def test_bad_timestamps_json_is_a_config_error(option: str) -> None:
    streaming = option.startswith("starting")
    for value, match in (('{"t": {"0": 9223372036854775808}}', f"must be an int >= 0 and <= {INT64_MAX}"),
                         ('{"t": {"01": 5}}', "partition '01'"), ('{"t": {"0": true}}', "must be an int")):
        with pytest.raises(ConfigError, match=f"option {option}.*{match}"):
            read(streaming, subscribe="t", **{option: value})


@pytest.mark.parametrize(("option", "maximum"), [
    ("maxOffsetsPerTrigger", INT64_MAX), ("minOffsetsPerTrigger", INT64_MAX), ("minPartitions", 2**31 - 1),
    ("maxRecordsPerPartition", INT64_MAX), ("kafkaConsumer.pollTimeoutMs", INT64_MAX),
    ("fetchOffset.numRetries", 2**31 - 1), ("fetchOffset.retryIntervalMs", 2**31 - 1),
    ("startingTimestamp", INT64_MAX),
])
def test_integer_options_take_ascii_digits_up_to_their_java_type(option: str, maximum: int) -> None:
    for value in ("1_000", "\u0663", "\u0661\u0660", "1e3", "0x10", "", "5.0", "9" * 5000):
        with pytest.raises(ConfigError, match=rf"option {option} must be an integer in \d+\.\.{maximum} "
                                              "written with the digits 0-9"):
            read(subscribe="t", **{option: value})
    with pytest.raises(ConfigError, match=rf"option {option} must be <= {maximum}, got {maximum + 1}"):
        read(subscribe="t", **{option: str(maximum + 1)})
    opts = read(subscribe="t", **{option: f" {maximum} "})
    assert maximum in vars(opts).values()


@pytest.mark.parametrize(("value", "match"), [
    ("99999999999999999999999d", r"at most 9223372036854775807 ms"),
    ("106751991168d", r"at most 9223372036854775807 ms"),
    ("\u0665s", r"digits 0-9"),
    ("-5s", r"duration like"),
    ("1w", r"units ms, s, m, min, h, d"),
])
def test_bad_max_trigger_delay_is_a_config_error(value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=f"option maxTriggerDelay .*{match}"):
        read(subscribe="t", maxTriggerDelay=value)


def test_max_trigger_delay_up_to_the_largest_long() -> None:
    delay = read(subscribe="t", maxTriggerDelay="106751991167d").max_trigger_delay_ms
    assert delay == 106751991167 * 86_400_000


@pytest.mark.parametrize("value", ["bad topic!", "ok,bad topic!", "a" * 250, "..", "t\x00"])
def test_subscribe_refuses_a_bad_topic_name(value: str) -> None:
    with pytest.raises(ConfigError, match=r"option subscribe: invalid topic name .*1\.\.249 characters"):
        read(subscribe=value)


@pytest.mark.parametrize("value", ["", "bad topic!", ".", "a" * 250])
def test_write_topic_refuses_a_bad_topic_name(value: str) -> None:
    with pytest.raises(ConfigError, match=r"write option topic: invalid topic name .*1\.\.249 characters"):
        WriteOptions.parse({**BS, "topic": value})


SASL = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "u"}


def test_options_repr_masks_secrets_and_pickling_keeps_them() -> None:
    ro = ReadOptions.parse({**BASE, **SASL, "kafka.sasl.password": "SparkS3cr3t-99",
                            "kafka.ssl.key.password": "KeyS3cr3t-7"}, True)
    wo = WriteOptions.parse({**BS, **SASL, "kafka.sasl.password": "SparkS3cr3t-98", "topic": "t"})
    for opts, secrets in ((ro, ("SparkS3cr3t-99", "KeyS3cr3t-7")), (wo, ("SparkS3cr3t-98",))):
        for text in (repr(opts), str(opts), f"{opts}", repr([opts])):
            assert not any(s in text for s in secrets), text
        assert "('sasl.password', '***')" in repr(opts) and "('sasl.username', 'u')" in repr(opts)
        for back in (pickle.loads(pickle.dumps(opts)), copy.deepcopy(opts)):
            assert back == opts
            assert dict(back.kafka)["sasl.password"] == secrets[0]
