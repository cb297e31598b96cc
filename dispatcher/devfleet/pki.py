"""The dev fleet's certificates: ``dispatcher.kube.pki`` (shared with the controller's
self-managed webhook certificates), re-exported under the name the dev fleet always used."""

from dispatcher.kube.pki import CertificateAuthority, load_ca, new_ca, rsa_key_pem

__all__ = ["CertificateAuthority", "load_ca", "new_ca", "rsa_key_pem"]
