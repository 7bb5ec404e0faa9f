"""mbskills: agent skills for Megatron-Bridge, their validator, installer and eval runner.

The core (loading, validation, install) imports neither torch nor megatron, so the
CLI starts fast; Megatron claim checks live in their own part.
"""

__version__ = "0.1.0"
