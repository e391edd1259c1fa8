"""The names LTI 1.3 Core, Advantage and Dynamic Registration give things, and the role mapping.

Contract:
- Claim names are the full URIs an id_token carries (``MESSAGE_TYPE``, ``DEPLOYMENT_ID``, ...).
- ``course_role(roles)`` is the ``CourseRole`` a launch's roles claim gives in the launched course. Only context
  (membership) roles count, in full (``http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor``) or short
  (``Instructor``) form; institution and system roles never make anyone staff of a course. The teaching
  assistant and grader sub-roles of Instructor give ``ta`` (platforms may send the principal Instructor role
  with them); Instructor and its other sub-roles give ``instructor``; anything else, no role included, is
  ``learner``.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.domain.models import CourseRole

LTI_VERSION = "1.3.0"
RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"

_LTI = "https://purl.imsglobal.org/spec/lti/claim/"
MESSAGE_TYPE = _LTI + "message_type"
VERSION = _LTI + "version"
DEPLOYMENT_ID = _LTI + "deployment_id"
TARGET_LINK_URI = _LTI + "target_link_uri"
RESOURCE_LINK = _LTI + "resource_link"
ROLES = _LTI + "roles"
CONTEXT = _LTI + "context"
TOOL_PLATFORM = _LTI + "tool_platform"
AGS_ENDPOINT = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_SERVICE = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"

TOOL_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-tool-configuration"
PLATFORM_CONFIGURATION = "https://purl.imsglobal.org/spec/lti-platform-configuration"

# What gpulab asks for: AGS line items and scores (the outbox of a later slice) and NRPS rosters.
SCOPES = (
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
    "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
)

MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership"
ASSISTANT_SUB_ROLES = frozenset({"TeachingAssistant", "Grader"})


def _membership_role(role: str) -> tuple[str, str] | None:
    """Return (principal, sub-role) of a context role, or None for an institution/system role or garbage."""
    if role.startswith(MEMBERSHIP + "#"):
        return role.removeprefix(MEMBERSHIP + "#"), ""
    if role.startswith(MEMBERSHIP + "/"):
        principal, _, sub = role.removeprefix(MEMBERSHIP + "/").partition("#")
        return principal, sub
    if "/" not in role and ":" not in role and "#" not in role:  # the short form LTI 1.3 still allows
        return role, ""
    return None


def course_role(roles: Iterable[object]) -> CourseRole:
    """Return the course role a launch's roles claim gives (see the module contract)."""
    parsed = [found for role in roles if isinstance(role, str) and (found := _membership_role(role))]
    if any(sub in ASSISTANT_SUB_ROLES or principal in ASSISTANT_SUB_ROLES for principal, sub in parsed):
        return CourseRole.ta
    if any(principal == "Instructor" for principal, _ in parsed):
        return CourseRole.instructor
    return CourseRole.learner
