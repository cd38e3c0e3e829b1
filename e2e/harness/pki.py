"""A throwaway PKI made with openssl: one CA for everything, a serving certificate for the
API server, and client certificates whose subject is the identity the API server checks
(CN is the user, O the group). Lives and dies with the cluster's state directory."""

from __future__ import annotations

import subprocess
from pathlib import Path


class Pki:
    """Certificates under ``dir``; ``cert(name)`` and ``key(name)`` give their paths."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self.ca = dir / "ca.crt"
        self.ca_key = dir / "ca.key"
        if not self.ca.exists():
            _openssl("genrsa", "-out", str(self.ca_key), "2048")
            _openssl(
                *("req", "-x509", "-new", "-nodes", "-key", str(self.ca_key)),
                *("-subj", "/CN=devicehost-e2e-ca", "-days", "2", "-out", str(self.ca)),
            )
        self.sa_key = dir / "sa.key"
        self.sa_pub = dir / "sa.pub"
        if not self.sa_key.exists():
            _openssl("genrsa", "-out", str(self.sa_key), "2048")
            _openssl("rsa", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    def issue(
        self,
        name: str,
        cn: str,
        org: str = "",
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> None:
        """A certificate signed by the CA; with names or addresses it also serves TLS."""
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        csr = self.dir / f"{name}.csr"
        _openssl("genrsa", "-out", str(self.key(name)), "2048")
        _openssl("req", "-new", "-key", str(self.key(name)), "-subj", subject, "-out", str(csr))
        ext = self.dir / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
        lines.append("extendedKeyUsage=clientAuth" + (",serverAuth" if dns or ips else ""))
        alt = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        if alt:
            lines.append("subjectAltName=" + ",".join(alt))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            *("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key)),
            *("-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(self.cert(name))),
        )
        csr.unlink()
        ext.unlink()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)
