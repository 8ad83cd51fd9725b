"""``oauth_cb`` providers are forgotten when their client closes (issue #28): kipconsumer._oauth keeps
each provider under its librdkafka handle until close(), so neither the registry nor the provider
(and what it holds: an identity provider's client, a secret) outlive the client. No broker needed."""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any

from kipconsumer import KafkaConsumer, KafkaProducer, _oauth

NOWHERE = "127.0.0.1:1"  # nothing listens: the client starts, asks the provider once, never connects


class _Provider:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, config: str) -> tuple[str, float]:
        self.calls += 1
        return "header.eyJzdWIiOiJ0ZXN0In0.sig", time.time() + 60


def _conf(provider: Any) -> dict[str, Any]:
    return {"bootstrap.servers": NOWHERE, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": provider}


def _registered() -> int:
    return len(_oauth._providers)


def test_consumer_and_producer_forget_their_provider_on_close() -> None:
    before = _registered()
    provider = _Provider()
    ref = weakref.ref(provider)
    c = KafkaConsumer({**_conf(provider), "group.id": "oauth-registry"})
    p = KafkaProducer(_conf(provider))
    assert _registered() == before + 2
    deadline = time.monotonic() + 5
    while provider.calls < 2 and time.monotonic() < deadline:  # librdkafka asks at start
        time.sleep(0.05)
    c.close(timeout=2)
    p.close(timeout=2)
    assert _registered() == before
    del provider, c, p
    gc.collect()
    assert ref() is None, "the provider outlived its clients"


def test_consumer_dropped_without_close_forgets_its_provider() -> None:
    before = _registered()
    provider = _Provider()
    ref = weakref.ref(provider)
    c = KafkaConsumer({**_conf(provider), "group.id": "oauth-registry"})
    assert _registered() == before + 1
    del c, provider
    gc.collect()
    assert _registered() == before
    assert ref() is None
