"""What the class gets wrong on one exercise: failing tests, wrong quiz picks, attempts and time to pass, who is stuck.

Contract:
- Counts the graded submissions of learners (users with the ``learner`` role) to any version of the exercise
  within the viewer's ``WorkScope`` (``app.domain.courses.policy``: the work of the courses they staff, practice
  work only for the practice course's staff); with ``course``, only those of that course's learners.
  Platform errors (verdict ``internal_error``) are the platform's, not the learner's, and are left out.
- ``exercise_insights`` returns ``Insights``:
  - ``tests``: per hidden test (for a quiz: per question), how many graded submissions failed it and how many
    learners, its points lost, and its failure messages grouped by their first line (``MESSAGE_GROUPS`` most
    frequent per test, each at most ``MESSAGE_CHARS`` long); most failed first.
  - ``picks``: for a quiz, per choice question, how often each option was picked in the attempts that got the
    question wrong (the option text from the current version), most picked first.
  - per learner (``learners``, ordered: stuck first, most attempts first): attempts, best score, whether and
    when they passed, submissions up to and including the first pass, seconds from the first submission to the
    first pass, and the tests their latest submission failed. A learner is **stuck** who tried and never passed.
  - ``attempts_histogram``: learners who passed, by attempts to pass (1, 2, ... ``ATTEMPT_BUCKETS`` or more).
- ``learners_csv`` and ``tests_csv`` write the same as CSV, every text cell formula-escaped
(``platform.csvsafe.csv_cell``).
- Never commits; reads only.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from statistics import median

from sqlalchemy.orm import Session, selectinload

from app.domain.courses.policy import WorkScope
from app.domain.models import Course, CourseMember, CourseRole, Exercise, Role, Submission, SubmissionStatus, User
from app.domain.platform.clock import as_utc
from app.domain.platform.csvsafe import csv_cell
from app.domain.submissions.lifecycle import of_exercise
from worker.bank.quiz.format import ChoiceQuestion, parse_quiz
from worker.core.outcome import Verdict

MESSAGE_GROUPS = 5
MESSAGE_CHARS = 200
ATTEMPT_BUCKETS = 6
FAILED = ("failed", "error")  # test outcomes that are the learner's mistake ("skipped" is an unanswered question)


@dataclass
class MessageGroup:
    text: str
    count: int


@dataclass
class TestInsight:
    name: str
    failures: int = 0
    learners: int = 0
    points_lost: float = 0.0
    messages: list[MessageGroup] = field(default_factory=list)


@dataclass
class OptionPick:
    option: str
    text: str
    count: int
    correct: bool


@dataclass
class QuestionPicks:
    question: str
    wrong_attempts: int
    options: list[OptionPick]


@dataclass
class LearnerInsight:
    email: str
    attempts: int
    best_score: float | None
    max_score: float
    passed: bool
    first_at: datetime
    last_at: datetime
    passed_at: datetime | None
    attempts_to_pass: int | None
    time_to_pass_s: float | None
    latest_failing: list[str]

    @property
    def stuck(self) -> bool:
        return not self.passed


@dataclass
class Insights:
    slug: str
    title: str
    kind: str
    submissions: int
    tests: list[TestInsight]
    picks: list[QuestionPicks]
    learners: list[LearnerInsight]
    attempts_histogram: list[int]

    @property
    def passed(self) -> int:
        return sum(1 for row in self.learners if row.passed)

    @property
    def stuck(self) -> list[LearnerInsight]:
        return [row for row in self.learners if row.stuck]

    @property
    def median_attempts_to_pass(self) -> float | None:
        values = [row.attempts_to_pass for row in self.learners if row.attempts_to_pass is not None]
        return float(median(values)) if values else None

    @property
    def median_time_to_pass_s(self) -> float | None:
        values = [row.time_to_pass_s for row in self.learners if row.time_to_pass_s is not None]
        return float(median(values)) if values else None


def _first_line(message: str) -> str:
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "(no message)")
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"


def _graded(session: Session, exercise: Exercise, scope: WorkScope, course: Course | None = None) -> list[Submission]:
    stmt = (
        of_exercise(exercise)
        .join(User, Submission.user_id == User.id)
        .where(scope.submissions())
        .where(User.role == Role.learner, Submission.status == SubmissionStatus.graded)
        .where(Submission.verdict != Verdict.internal_error)
        .options(selectinload(Submission.tests), selectinload(Submission.user))
        .order_by(Submission.created_at, Submission.id)
    )
    if course is not None:  # only the course's learners (their practice too, where the scope holds it)
        stmt = stmt.join(CourseMember, CourseMember.user_id == User.id).where(
            CourseMember.course_id == course.id, CourseMember.role == CourseRole.learner
        )
    return list(session.scalars(stmt))


def _tests(rows: list[Submission]) -> list[TestInsight]:
    by_name: dict[str, TestInsight] = {}
    who: dict[str, set[int]] = defaultdict(set)
    texts: dict[str, Counter[str]] = defaultdict(Counter)
    for sub in rows:
        for test in sub.tests:
            insight = by_name.setdefault(test.name, TestInsight(name=test.name))
            if test.outcome not in FAILED:
                continue
            insight.failures += 1
            insight.points_lost += max(0.0, test.max_points - test.points)
            who[test.name].add(sub.user_id or 0)
            texts[test.name][_first_line(test.message)] += 1
    for name, insight in by_name.items():
        insight.learners = len(who[name])
        insight.messages = [MessageGroup(text, n) for text, n in texts[name].most_common(MESSAGE_GROUPS)]
    return sorted(by_name.values(), key=lambda t: (-t.failures, t.name))


def _picks(exercise: Exercise, rows: list[Submission]) -> list[QuestionPicks]:
    version = exercise.current_version
    if version is None or version.kind != "quiz":
        return []
    quiz = parse_quiz(exercise.slug, dict(version.files)["quiz.toml"])
    choices = {q.id: q for q in quiz.questions if isinstance(q, ChoiceQuestion)}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    wrong: Counter[str] = Counter()
    for sub in rows:
        try:
            answers = json.loads(sub.code)
        except ValueError:
            continue
        outcomes = {t.name: t.outcome for t in sub.tests}
        for qid, picked in answers.items() if isinstance(answers, dict) else ():
            if qid in choices and outcomes.get(qid) in FAILED and isinstance(picked, list):
                wrong[qid] += 1
                counts[qid].update(str(p) for p in picked)
    out = []
    for qid, question in choices.items():
        if not wrong[qid]:
            continue
        texts = {o.id: o.text for o in question.options}
        options = [OptionPick(option=o, text=texts.get(o, "(option no longer in the quiz)"), count=n,
                              correct=o in question.answer) for o, n in counts[qid].most_common()]  # fmt: skip
        out.append(QuestionPicks(question=qid, wrong_attempts=wrong[qid], options=options))
    return sorted(out, key=lambda q: (-q.wrong_attempts, q.question))


def _learners(rows: list[Submission], max_score: float) -> list[LearnerInsight]:
    per_user: dict[int, list[Submission]] = defaultdict(list)
    for sub in rows:
        if sub.user_id is not None:
            per_user[sub.user_id].append(sub)
    out = []
    for subs in per_user.values():
        first_pass = next((i for i, s in enumerate(subs) if s.verdict is Verdict.passed), None)
        first_at, last_at = as_utc(subs[0].created_at), as_utc(subs[-1].created_at)
        passed_at = as_utc(subs[first_pass].created_at) if first_pass is not None else None
        scores = [s.score for s in subs if s.score is not None]
        latest = subs[-1]
        out.append(LearnerInsight(
            email=subs[0].user.email if subs[0].user else "", attempts=len(subs),
            best_score=max(scores) if scores else None, max_score=max_score, passed=first_pass is not None,
            first_at=first_at, last_at=last_at, passed_at=passed_at,
            attempts_to_pass=first_pass + 1 if first_pass is not None else None,
            time_to_pass_s=(passed_at - first_at).total_seconds() if passed_at is not None else None,
            latest_failing=[t.name for t in latest.tests if t.outcome in FAILED],
        ))  # fmt: skip
    return sorted(out, key=lambda r: (r.passed, -r.attempts, r.email))


def exercise_insights(
    *, session: Session, exercise: Exercise, scope: WorkScope, course: Course | None = None
) -> Insights:
    """Return what the class gets wrong on ``exercise`` within ``scope``; ``course``: its learners only."""
    rows = _graded(session, exercise, scope, course)
    version = exercise.current_version
    max_score = version.max_score if version is not None else 0.0
    learners = _learners(rows, max_score)
    histogram = [0] * ATTEMPT_BUCKETS
    for row in learners:
        if row.attempts_to_pass is not None:
            histogram[min(ATTEMPT_BUCKETS, row.attempts_to_pass) - 1] += 1
    return Insights(
        slug=exercise.slug, title=version.title if version is not None else exercise.slug,
        kind=version.kind if version is not None else "code", submissions=len(rows), tests=_tests(rows),
        picks=_picks(exercise, rows), learners=learners, attempts_histogram=histogram,
    )  # fmt: skip


def _write(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return out.getvalue()


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


LEARNER_COLUMNS = ("email", "attempts", "best_score", "max_score", "passed", "attempts_to_pass", "first_submission",
                   "first_pass", "time_to_pass_s", "latest_failing_tests")  # fmt: skip
TEST_COLUMNS = ("test", "failures", "learners", "points_lost", "top_message", "top_message_count")


def learners_csv(insights: Insights) -> str:
    """Return one CSV row per learner who tried the exercise (see ``LEARNER_COLUMNS``)."""
    return _write(LEARNER_COLUMNS, [
        (r.email, r.attempts, _num(r.best_score), _num(r.max_score), "yes" if r.passed else "no",
         r.attempts_to_pass or "", r.first_at.isoformat(), r.passed_at.isoformat() if r.passed_at else "",
         _num(round(r.time_to_pass_s, 1) if r.time_to_pass_s is not None else None), " ".join(r.latest_failing))
        for r in insights.learners
    ])  # fmt: skip


def tests_csv(insights: Insights) -> str:
    """Return one CSV row per hidden test or question (see ``TEST_COLUMNS``)."""
    return _write(TEST_COLUMNS, [
        (t.name, t.failures, t.learners, _num(t.points_lost), t.messages[0].text if t.messages else "",
         t.messages[0].count if t.messages else 0)
        for t in insights.tests
    ])  # fmt: skip
