"""Installing the skills into an agent client's skills folder, verifying an installed copy, and removing it."""

from .clients import CLIENTS, Client, destination, duplicates
from .installer import LEGACY_MANIFEST, Difference, InstallResult, install, manifest_path, uninstall, verify

__all__ = ["CLIENTS", "LEGACY_MANIFEST", "Client", "Difference", "InstallResult", "destination", "duplicates", "install", "manifest_path", "uninstall", "verify"]
