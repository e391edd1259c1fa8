"""Accounts: who people are and how they prove it.

Contract, by module:
- ``people``: accounts made by admins (one-time passwords), roles, activation, password resets, CSV import.
- ``passwords``: hashing (argon2id), e-mail rules, creating and authenticating users, changing a password, the
  login rate limit. Cookie sessions and CSRF are the web side's (``app.web.sessions``).
- ``tokens``: personal API tokens: made, listed, revoked, looked up by hash with their scopes.
"""
