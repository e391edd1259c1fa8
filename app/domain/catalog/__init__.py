"""The catalogue's stored versions, read: a version's spec parsed once, and a learner's variant of it.

Contract, by module:
- ``specs``: ``spec_of(version)``, the parsed exercise of a stored version, cached by slug and content hash.
- ``variants``: a learner's parameters of an exercise (an HMAC seed per learner and context), kept on the row.
"""
