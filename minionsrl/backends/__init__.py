"""Backends run rollout functions (``base``: the interface; ``local`` is the embedded default).

Kept empty on purpose: a ``local`` instance (``backends.local_worker``) imports only the function side.
"""
