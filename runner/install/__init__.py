"""Installing the skills into an agent's skills folder, and verifying an installed copy."""

from .installer import MANIFEST, Difference, InstallResult, install, verify

__all__ = ["MANIFEST", "Difference", "InstallResult", "install", "verify"]
