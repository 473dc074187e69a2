"""Certificates and webhook registrations for the operators running as host processes.

On a cluster each operator's webhook is a Service behind cert-manager or the operator's own
rotator; here every operator serves on 127.0.0.1 with one server certificate signed by our own CA,
and its upstream webhook configurations are registered by `clientConfig.url` and `caBundle` (what
controller-runtime's envtest does).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TRAINING_OPERATOR_WEBHOOK_PORT = 19443
JOBSET_WEBHOOK_PORT = 19444
TRAINER_WEBHOOK_PORT = 19445


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1 ("RSA PRIVATE KEY"): the form the training-operator's cert-controller parses.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())  # fmt: skip


def make_certs(directory: Path) -> dict[str, bytes]:
    """A CA (`training-operator-ca`) and one server certificate for both operators' webhooks.

    Valid ten years, so the training-operator's rotator (90-day look-ahead) keeps them.
    """
    if (directory / "tls.crt").exists():
        return {name: (directory / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    until = now + datetime.timedelta(days=3650)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "training-operator"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "training-operator-ca")])  # fmt: skip
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("training-operator-ca")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = ["training-operator.kubeflow.svc", "jobset-webhook-service.jobset-system.svc", "localhost"]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([*(x509.DNSName(n) for n in names),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem_key(ca_key),
        "tls.crt": server.public_bytes(serialization.Encoding.PEM),
        "tls.key": _pem_key(key),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


# --- webhook configurations -----------------------------------------------------------------


def _by_url(config: dict[str, Any], port: int, ca: bytes) -> dict[str, Any]:
    for hook in config.get("webhooks") or []:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
    return config


def jobset_webhooks(jobset_module: Path, ca: bytes) -> list[dict[str, Any]]:
    """JobSet's webhook configurations with its kustomize patches (pod hooks scoped to JobSet pods)."""
    base = jobset_module / "config/components/webhook"
    configs = [c for c in yaml.safe_load_all((base / "manifests.yaml").read_text()) if c]
    for config in configs:
        patch_file = base / "patches" / ("mutating-patch.yaml" if config["kind"].startswith("Mutating") else
                                         "validating-patch.yaml")  # fmt: skip
        for op in yaml.safe_load(patch_file.read_text()):
            index = int(op["path"].rsplit("/", 1)[1])
            config["webhooks"][index] = op["value"]
        config["metadata"]["name"] = "jobset-" + config["metadata"]["name"]
        _by_url(config, JOBSET_WEBHOOK_PORT, ca)
    return configs


def training_operator_webhooks(module: Path, ca: bytes) -> list[dict[str, Any]]:
    """The training-operator's VWC, PyTorchJob hook only, under the name its rotator manages."""
    configs = [c for c in yaml.safe_load_all((module / "manifests/base/webhook/manifests.yaml").read_text()) if c]
    out = []
    for config in configs:
        config["metadata"]["name"] = "validator.training-operator.kubeflow.org"
        config["webhooks"] = [h for h in config["webhooks"] if "pytorchjob" in h["clientConfig"]["service"]["path"]]
        out.append(_by_url(config, TRAINING_OPERATOR_WEBHOOK_PORT, ca))
    return out


def trainer_webhooks(trainer_module: Path, ca: bytes) -> list[dict[str, Any]]:
    """Trainer v2's webhook configurations, named and scoped as its kustomize patches do."""
    base = trainer_module / "manifests/base/webhook"
    names = {"MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
             "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org"}  # fmt: skip
    configs = [c for c in yaml.safe_load_all((base / "manifests.yaml").read_text()) if c]
    for config in configs:
        patch_file = base / (
            "patch_mutating.yaml" if config["kind"].startswith("Mutating") else "patch_validating.yaml"
        )
        for op in yaml.safe_load(patch_file.read_text()):
            parts = op["path"].strip("/").split("/")
            if parts[0] == "webhooks" and parts[-1] == "objectSelector":
                config["webhooks"][int(parts[1])]["objectSelector"] = op["value"]
        config["metadata"]["name"] = names[config["kind"]]
        _by_url(config, TRAINER_WEBHOOK_PORT, ca)
    return configs


def webhook_secret(files: dict[str, bytes]) -> dict[str, Any]:
    """The Secret the training-operator's rotator reads (it updates, never creates)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        "data": {name: base64.b64encode(data).decode() for name, data in files.items()},
    }
