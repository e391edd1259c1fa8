"""LTI 1.3 Advantage, tool side: learning platforms (Moodle, Canvas...) launch gpulab and sign their people in.

Contract, by module (each owns one step; the web side is ``app.web.routes.lti``):
- ``vocabulary``: the claim names, message types, scopes and roles of the IMS specs; ``course_role(roles)``.
- ``toolconfig``: what gpulab tells a platform about itself (``ToolUrls``: login, launch, JWKS endpoints; the
  client registration with the ``lti-tool-configuration`` claim).
- ``outbound``: every HTTP call gpulab makes to a platform (JSON only, time- and size-limited, no redirects).
- ``keys``: gpulab's own RSA signing keys (made at first use, rotated, published as a JWKS).
- ``platforms``: registered platforms and their deployment ids (manual registration, deployments added and
  removed, the deployments whose verified launches were refused, to accept or dismiss, the opt-in to accept a
  client's new deployments, deleting one nothing launched from, look-up at login).
- ``registration``: IMS LTI Dynamic Registration 1.0 (fetch and check the platform's OpenID configuration,
  register gpulab as its client, store the platform).
- ``platform_keys``: the platforms' public keys, fetched from their JWKS URL and cached per process (an unseen
  kid makes one refetch, bounded per platform).
- ``oidc``: the third-party initiated login (state and nonce, the authorisation request, the state cookie).
- ``launch``: verifying the id_token a platform posts (signature, issuer, audience, times, nonce, deployment,
  message type, version) into a ``Launch``; used nonces are refused.
- ``provisioning``: what a verified launch does here: the account, the course, the enrollment, the link.
- ``deep_linking``: an instructor's Deep Linking request, the picker's choices and the signed response.
- ``tokens``: OAuth 2 client-credentials tokens for the services, asked for with a JWT client assertion signed by
  gpulab's key, cached per platform and scope.
- ``scores``: Assignment and Grade Services: the score outbox, filled in a grading's transaction and delivered
  with back-off by every grading process's sweeper (given up when the platform refuses a score for good),
  listed for staff (all, or one course's).
- ``roster``: Names and Role Provisioning Services: staff sync a course's members from the platform.
Functions that take a session take it keyword-only and never commit: the caller commits. Refusals raise the
shared errors of ``worker.core.errors``: ``Unauthorized`` (the token cannot be trusted), ``Forbidden`` (this
browser, platform or deployment may not do this), ``InvalidInput`` (a malformed request), ``Conflict``.
"""
