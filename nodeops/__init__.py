"""nodeops: node operations for Kubernetes in one asyncio operator."""

__version__ = "0.1.0"
