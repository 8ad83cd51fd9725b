"""Which Apache Kafka releases a :class:`~kipconsumer.testing.KafkaCluster` runs, and what each has.

Every release from 3.7.0 to 4.4.x runs as KRaft combined nodes formatted by its own storage tool
with a static ``controller.quorum.voters`` list (3.7 and 3.8 have no ``--standalone``). What differs
between releases and matters to a test cluster:

* share groups (KIP-932): from 4.1 (preview, GA in 4.2), enabled at format time with the feature
  ``share.version=1``; the ``share.*`` /
  ``group.share.*`` server properties are only written for those releases;
* the consumer group protocol (KIP-848): served by default from 4.0; 3.7-3.9 have it as a preview
  that is off unless ``group.coordinator.rebalance.protocols=classic,consumer`` (and, on 3.7,
  ``group.coordinator.new.enable=true``) are passed in ``broker_config``; a KafkaCluster leaves the
  release's default, so a 3.x cluster serves the classic protocol only, as production 3.x does.

A version is ``"X.Y.Z"`` (that release) or ``"X.Y"`` (the newest patch release of that line known
here, :data:`NEWEST_PATCH`). Anything else, or a release outside the supported lines, is a
:class:`~kipconsumer.errors.ConfigError` naming ``version`` and the supported range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kipconsumer.errors import ConfigError

__all__ = ["NEWEST_PATCH", "SUPPORTED_RANGE", "KafkaRelease", "parse_release"]

#: The newest patch release of every supported line that Maven Central served on 2026-11-28.
NEWEST_PATCH: dict[str, str] = {
    "3.7": "3.7.2", "3.8": "3.8.1", "3.9": "3.9.2", "4.0": "4.0.2",
    "4.1": "4.1.2", "4.2": "4.2.2", "4.3": "4.3.1", "4.4": "4.4.0",
}
_OLDEST = (3, 7)
_NEWEST = (4, 4)
#: The supported releases, as error messages state them.
SUPPORTED_RANGE = "3.7.0 to 4.4.x (any X.Y.Z release of the lines 3.7, 3.8, 3.9, 4.0, 4.1, 4.2, 4.3, 4.4)"

_RELEASE_RE = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?")


@dataclass(frozen=True, order=True)
class KafkaRelease:
    """One Apache Kafka release and the features a test cluster of it has."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def line(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def share_groups(self) -> bool:
        """KIP-932 share groups (``share.version=1`` at format): 4.1 and later."""
        return self.line >= (4, 1)

    @property
    def consumer_protocol(self) -> bool:
        """KIP-848's ``group.protocol=consumer`` served with the release's default configs: 4.0 and later."""
        return self.line >= (4, 0)


def parse_release(version: object) -> KafkaRelease:
    """``version`` (``"X.Y.Z"`` or ``"X.Y"``) as a supported :class:`KafkaRelease`; ConfigError otherwise."""
    m = _RELEASE_RE.fullmatch(version) if isinstance(version, str) else None
    if m is None:
        raise ConfigError(
            f"version: expected a Kafka release such as '4.2.1' or '3.9' (newest patch of that line), "
            f"got {version!r}; supported: {SUPPORTED_RANGE}"
        )
    major, minor = int(m.group(1)), int(m.group(2))
    if not _OLDEST <= (major, minor) <= _NEWEST:
        raise ConfigError(
            f"version: Kafka {version} is not supported by KafkaCluster; supported: {SUPPORTED_RANGE}"
        )
    if m.group(3) is None:
        return parse_release(NEWEST_PATCH[f"{major}.{minor}"])
    return KafkaRelease(major, minor, int(m.group(3)))
