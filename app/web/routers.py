"""Every router of the web side, aggregated once: the JSON API (``api_router``) and the HTML pages (``page_router``).

Contract: ``app.main.create_app`` includes exactly these two; a new router is added here and nowhere else. The
API routers are in the OpenAPI schema (``/openapi.json``), the page routers are not, and every page router
carries ``app.web.pages.FORM_CSRF``.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.web.routes import (
    api_admin,
    api_auth,
    api_courses,
    api_exercises,
    api_instructor,
    api_quiz,
    api_submissions,
    health,
    pages,
    pages_admin,
    pages_instructor,
)

api_router = APIRouter()
for _router in (
    api_auth.router,
    api_exercises.router,
    api_quiz.router,
    api_submissions.router,
    api_courses.router,
    api_instructor.router,
    api_admin.router,
    health.router,  # /healthz, /readyz, /metrics: no login, no session
):
    api_router.include_router(_router)

page_router = APIRouter()
for _router in (pages.router, pages_instructor.router, pages_admin.router):
    page_router.include_router(_router)
