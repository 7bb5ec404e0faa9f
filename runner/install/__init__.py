"""Installing the skills into an agent client's skills folder, and verifying an installed copy."""

from .clients import CLIENTS, Client, destination, duplicates
from .installer import LEGACY_MANIFEST, Difference, InstallResult, install, manifest_path, verify

__all__ = ["CLIENTS", "LEGACY_MANIFEST", "Client", "Difference", "InstallResult", "destination", "duplicates", "install", "manifest_path", "verify"]
