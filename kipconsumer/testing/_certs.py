"""A certificate authority of its own for test clusters: PEM files made with the ``openssl`` tool.

:class:`TestCA` makes, in one folder, a CA (``ca.pem``, ``ca.key``) and certificates it signs: for a
server (``127.0.0.1`` and ``localhost``, as DNS and IP names), for a client (mTLS), and on request
certificates meant to be refused (expired, for another host, or signed by another CA). Keys are
EC P-256, unencrypted PKCS#8 (what Kafka's PEM keystores and librdkafka read) unless a password is
given. Raises :class:`~kipconsumer.testing.KafkaClusterError` when ``openssl`` is missing or fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kipconsumer.testing._errors import KafkaClusterError

__all__ = ["CertPair", "TestCA"]

_CA_CONFIG = """[ca]
default_ca = kip
[kip]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
commonName = supplied
"""


@dataclass(frozen=True)
class CertPair:
    """A certificate and its key, as PEM files; ``key_password`` if the key is encrypted."""

    cert: Path
    key: Path
    key_password: str | None = None

    def keystore_pem(self) -> Path:
        """One PEM file of the key followed by the certificate (Kafka's ``ssl.keystore.type=PEM``
        file form); written next to the certificate on first use."""
        path = self.cert.with_suffix(".keystore.pem")
        if not path.exists():
            path.write_text(self.key.read_text() + self.cert.read_text())
        return path


class TestCA:
    """A CA in ``folder`` (created if needed); the CA certificate is :attr:`ca_location`."""

    __test__ = False  # not a pytest test class

    def __init__(self, folder: Path, name: str = "kipconsumer test CA") -> None:
        self._openssl = shutil.which("openssl")
        if self._openssl is None:
            raise KafkaClusterError(
                "openssl is not installed: KafkaCluster(sasl_ssl=True) makes its certificates with it "
                "(Debian/Ubuntu: apt-get install openssl)"
            )
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.txt").write_text("")
        (folder / "serial").write_text("1000\n")
        self._config = folder / "ca.cnf"
        self._config.write_text(_CA_CONFIG.format(dir=folder))
        self.ca_location = folder / "ca.pem"
        self._ca_key = folder / "ca.key"
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", str(self._ca_key), "-out", str(self.ca_location), "-days", "3650",
                  "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip

    def issue(
        self,
        name: str,
        *,
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
        expired: bool = False,
        key_password: str | None = None,
    ) -> CertPair:
        """A certificate with common name ``name`` for ``hosts`` (DNS names; IP addresses are also
        added as IP names), valid for a year from yesterday, or ``expired`` (valid for one day in
        2020). Files ``<name>.pem`` and ``<name>.key`` in the CA's folder."""
        key = self.folder / f"{name}.key"
        csr = self.folder / f"{name}.csr"
        cert = self.folder / f"{name}.pem"
        ext = self.folder / f"{name}.ext"
        alt = [f"DNS:{h}" for h in hosts] + [f"IP:{h}" for h in hosts if _is_ip(h)]
        ext.write_text(
            f"subjectAltName={','.join(alt)}\nextendedKeyUsage=serverAuth,clientAuth\n"
            "basicConstraints=CA:FALSE\n"
        )
        self._run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")  # fmt: skip
        dates = ["-days", "365"]
        if expired:
            dates = ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"]
        self._run("ca", "-batch", "-notext", "-config", str(self._config), "-cert", str(self.ca_location),
                  "-keyfile", str(self._ca_key), "-in", str(csr), "-out", str(cert), "-extfile", str(ext),
                  *dates)  # fmt: skip
        if key_password is not None:
            plain = self.folder / f"{name}.plain.key"
            key.rename(plain)
            self._run("pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(plain), "-out", str(key),
                      "-passout", "env:KIP_KEY_PASSWORD", env={"KIP_KEY_PASSWORD": key_password})  # fmt: skip
            plain.unlink()
        return CertPair(cert, key, key_password)

    def _run(self, *args: str, env: dict[str, str] | None = None) -> None:
        assert self._openssl is not None
        proc = subprocess.run(
            [self._openssl, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.folder,
            check=False, env=None if env is None else {**os.environ, **env},
        )  # fmt: skip
        if proc.returncode != 0:
            out = proc.stdout.decode(errors="replace")[-2000:]
            raise KafkaClusterError(f"openssl {args[0]} failed ({proc.returncode}):\n{out}")


def _is_ip(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)
