"""Every router of the web side, aggregated once: the JSON API (``api_router``) and the HTML pages (``page_router``).

Contract: ``app.main.create_app`` includes exactly these two; a new router is added here and nowhere else. The
API routers are in the OpenAPI schema (``/openapi.json``), the page routers are not, and every page router
carries ``app.web.pages.FORM_CSRF`` except ``lti.router``, whose posts come cross-site from learning platforms by
design and are bound to the browser by the OIDC state and nonce instead (``app.web.routes.lti``).
"""

from __future__ import annotations

from fastapi import APIRouter

from app.web.routes import (
    api_admin,
    api_auth,
    api_courses,
    api_drafts,
    api_exercises,
    api_grading,
    api_instructor,
    api_lifecycle,
    api_lti,
    api_notebooks,
    api_quiz,
    api_regrade_requests,
    api_roster,
    api_similarity,
    api_submissions,
    api_tokens,
    health,
    lti,
    pages,
    pages_account,
    pages_admin,
    pages_audit,
    pages_course_staff,
    pages_courses,
    pages_gradebook,
    pages_grading,
    pages_instructor,
    pages_lti_admin,
    pages_regrade_requests,
    pages_similarity,
)

api_router = APIRouter()
for _router in (
    api_auth.router,
    api_exercises.router,
    api_exercises.path_router,  # /api/path: the learning path and my standing in it
    api_notebooks.router,  # an exercise as a notebook, and submitting one
    api_drafts.router,
    api_quiz.router,
    api_submissions.router,
    api_tokens.router,  # /api/me/tokens: personal access tokens of the API
    api_courses.router,
    api_roster.router,  # /api/courses/{slug}/roster/sync: the LMS roster (NRPS)
    api_instructor.router,
    api_regrade_requests.router,  # a learner's request that staff look again at a grade, and its thread
    api_similarity.router,  # similarity checks of an exercise's or an assignment's submissions
    api_grading.router,  # staff grading of text answers against their rubrics
    api_admin.router,
    api_lifecycle.router,  # next term from a course, archives, my data
    api_lifecycle.admin_router,  # the audit trail and erasure
    api_lti.router,  # /api/admin/lti: platforms, gpulab's keys, the LTI scores still owed
    health.router,  # /healthz, /readyz, /metrics: no login, no session
    lti.jwks_router,  # /lti/jwks: gpulab's public keys, JSON for the platforms
):
    api_router.include_router(_router)

page_router = APIRouter()
for _router in (
    pages.router,
    pages_courses.router,
    pages_course_staff.router,
    pages_gradebook.router,
    pages_instructor.router,
    pages_similarity.router,  # /instructor/.../similarity: runs, ranked pairs, side by side
    pages_grading.router,  # /instructor/.../grading and /grading/{id}: staff grade text answers by rubric
    pages_account.router,  # /account: access tokens; /cli/gpulab-submit.py: the learner's command line
    pages_admin.router,
    pages_audit.router,  # the audit trail, for a course's staff and for admins
    pages_lti_admin.router,  # /admin/lti: platforms, keys, the score outbox
    pages_regrade_requests.router,  # /regrade-requests: the list and each thread
    lti.router,
):
    page_router.include_router(_router)
