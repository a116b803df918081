"""A self-signed certificate for a TLS cache node on 127.0.0.1 (needs openssl)."""

import subprocess


def self_signed(directory):
    """(certificate, key) paths, written into ``directory``."""
    cert, key = directory / "node.crt", directory / "node.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key
