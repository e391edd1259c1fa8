"""``/api/instructor/exercises/{slug}/grades`` and ``/api/grades/{id}``: the grading queue, one grade, release.

Contract: as the grading pages (``app.web.routes.pages_grading``): the queue and releasing for instructors and
admins, narrowed to the work of the courses they staff (``WorkScopeDep``; releasing, those they instruct); one grade
for whoever ``app.domain.courses.policy.may_grade`` lets grade it (``GradeDep``: 404 for anyone else). A save names
the ``revision`` it was based on; another
grader's save in between is a 409, never a silent overwrite.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.domain.models import ManualGrade
from app.domain.platform.clock import UtcDatetime
from app.domain.results import staff_grades as sg
from app.domain.review import staff_grading as mg
from app.web.deps import CurrentUser, GradeDep, InstructorDep, SessionDep, StaffExerciseDep, WorkScopeDep
from app.web.errors import problem_responses

router = APIRouter(tags=["grading"])


class LineComment(BaseModel):
    line: int = Field(ge=1, le=1_000_000, description="a line of the submission, from 1")
    text: str = Field(min_length=1, max_length=mg.MAX_COMMENT_CHARS)


class GradeOut(BaseModel):
    id: int
    submission_id: str
    learner: str | None
    question: str
    answer: str = Field(description="the learner's text answer")
    checked: list[str] = Field(description="the rubric item ids that apply")
    comment: str
    line_comments: list[LineComment] = Field(description="code submissions: comments on lines")
    points: float | None = Field(description="None until graded")
    max_points: float
    revision: int = Field(description="send it back with a save: a stale one is refused (409)")
    graded_by: str | None
    graded_at: UtcDatetime | None
    released_at: UtcDatetime | None

    @classmethod
    def of(cls, grade: ManualGrade) -> GradeOut:
        sub = grade.submission
        return cls(
            id=grade.id, submission_id=grade.submission_id, learner=sub.user.email if sub.user else None,
            question=grade.question, answer=sg.answer_text(grade), checked=list(grade.checked), comment=grade.comment,
            line_comments=[LineComment.model_validate(c) for c in grade.line_comments or []],
            points=grade.points, max_points=grade.max_points, revision=grade.revision,
            graded_by=grade.graded_by.email if grade.graded_by else None, graded_at=grade.graded_at,
            released_at=grade.released_at,
        )  # fmt: skip


class GradeIn(BaseModel):
    checked: list[str] = Field(max_length=200)
    comment: str = Field(default="", max_length=mg.MAX_COMMENT_CHARS)
    line_comments: list[LineComment] = Field(default_factory=list, max_length=mg.MAX_LINE_COMMENTS)
    revision: int = Field(ge=0, le=mg.MAX_ID)


class ReleasedOut(BaseModel):
    released: int


GRADE_ERRORS = problem_responses(404, described={404: "no such grade that you may grade"})
SAVE_ERRORS = problem_responses(
    404, 409, 422, described={409: "another grader saved it since your revision, or the course is archived"}
)


@router.get("/api/instructor/exercises/{slug}/grades")
def list_grades(
    _user: InstructorDep, exercise: StaffExerciseDep, scope: WorkScopeDep, session: SessionDep
) -> list[GradeOut]:
    """List the exercise's grades of staff-graded answers in the courses I staff, oldest attempt first."""
    return [GradeOut.of(g) for g in mg.queue(session=session, scope=scope, exercise=exercise)]


@router.post("/api/instructor/exercises/{slug}/grades/release")
def release_grades(user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep) -> ReleasedOut:
    """Release every graded, unreleased answer of the exercise in the courses I instruct: the learners' score."""
    released = mg.release(session=session, user=user, exercise=exercise)
    session.commit()
    return ReleasedOut(released=released)


@router.get("/api/grades/{grade_id}", responses=GRADE_ERRORS)
def get_grade(grade: GradeDep) -> GradeOut:
    """Return one grade with the learner's answer."""
    return GradeOut.of(grade)


@router.put("/api/grades/{grade_id}", responses=SAVE_ERRORS)
def save_grade(grade: GradeDep, body: GradeIn, user: CurrentUser, session: SessionDep) -> GradeOut:
    """Grade an answer: the rubric items that apply and a comment, based on ``revision``."""
    mg.save(session=session, grade=grade, user=user, checked=body.checked, comment=body.comment,
            revision=body.revision, line_comments=[(c.line, c.text) for c in body.line_comments])  # fmt: skip
    session.commit()
    return GradeOut.of(grade)
