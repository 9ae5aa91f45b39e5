"""The class's answers: each student's own answers as CSV / JSON (kept in their session by the page), and the
teacher's view of the whole class, counted per step, in one SQLite file under the editkit cache.

The database holds no names: a student is a random id made by their browser session, so the teacher sees how many
students answered a step and how (right / close / wrong, and the answers given), never who. A student's later
answer to the same step replaces the earlier one, but their first answer (the prediction made before any
feedback) is kept beside it: "answer again" would otherwise turn every first wrong guess into a right one.

SQLite (the standard library's sqlite3) in WAL mode: readers never block the writer, and concurrent writers
(thirty students answering at once, in threads of one server or in several processes) wait for each other
(busy timeout) instead of failing. Each call opens its own connection, so the store is safe to share between
threads.
"""
from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import cache_dir

COLUMNS = ("fact", "step", "question", "answer", "verdict", "score", "truth", "at")
SCHEMA = """CREATE TABLE IF NOT EXISTS answers (
    lesson TEXT NOT NULL, fact TEXT NOT NULL, step TEXT NOT NULL, student TEXT NOT NULL,
    answer TEXT NOT NULL, verdict TEXT NOT NULL, score REAL NOT NULL, at REAL NOT NULL,
    first_answer TEXT, first_verdict TEXT,
    PRIMARY KEY (lesson, fact, step, student))"""
FIRST = ("first_answer", "first_verdict")  # added after the first classes: a store made before gets them on open


def class_id(manifest: dict) -> str:
    """The class whose answers are counted together: the lesson's model and the pack it began as (its creation
    time), not the version being served. Adding a fact serves a new version (the class's copy of the shipped pack,
    the fact published into it), and "back to the shipped pack" another: the class's answers stay with the class."""
    from ..core.cache import digest

    return digest(manifest["model"], manifest["fingerprint"], manifest.get("created"))


def default_path() -> Path:
    return cache_dir("lesson") / "class.sqlite3"


class ClassStore:
    """Anonymous answers per (lesson, fact, step, student); `summary` counts them, `clear` empties a lesson."""

    def __init__(self, path: Path | str | None = None, timeout: float = 30.0):
        self.path = Path(path) if path else default_path()
        self.timeout = timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(answers)")}
            for column in FIRST:
                if column not in have:  # a store of an earlier class: its rows' first answers are unknown (NULL)
                    db.execute(f"ALTER TABLE answers ADD COLUMN {column} TEXT")

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise EditkitError(f"cannot open the class database {self.path}: {exc}") from None
        db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    def record(self, lesson: str, fact: str, step: str, student: str, answer: str, verdict: str,
               score: float) -> None:
        """Store one student's answer to one step: the latest replaces the one before, the first is kept."""
        answer = str(answer)[:300]
        with closing(self._connect()) as db:
            db.execute("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (lesson, fact, step, student) DO UPDATE SET answer = excluded.answer, "
                       "verdict = excluded.verdict, score = excluded.score, at = excluded.at",
                       (lesson, fact, str(step), student, answer, verdict, float(score), time.time(), answer,
                        verdict))

    def summary(self, lesson: str) -> list[dict]:
        """Per (fact, step): how many students answered, their latest verdicts and most frequent answers, and how
        their first answers were graded (`first`: verdict -> students; a row stored before first answers were
        kept counts its latest)."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT fact, step, verdict, answer, COALESCE(first_verdict, verdict), COUNT(*), "
                              "AVG(score) FROM answers WHERE lesson = ? GROUP BY fact, step, verdict, answer, 5",
                              (lesson,)).fetchall()
        out: dict = {}
        for fact, step, verdict, answer, first, n, score in rows:
            s = out.setdefault((fact, step), {"fact": fact, "step": step, "students": 0, "right": 0, "close": 0,
                                              "wrong": 0, "answers": {}, "_score": 0.0,
                                              "first": {"right": 0, "close": 0, "wrong": 0}})
            s["students"] += n
            s[verdict] = s.get(verdict, 0) + n
            s["first"][first] = s["first"].get(first, 0) + n
            s["answers"][answer] = s["answers"].get(answer, 0) + n
            s["_score"] += score * n
        result = []
        for s in out.values():
            s["mean_score"] = s.pop("_score") / s["students"] if s["students"] else None
            s["answers"] = dict(sorted(s["answers"].items(), key=lambda kv: -kv[1]))
            result.append(s)
        return sorted(result, key=lambda s: (s["fact"], _step_order(s["step"])))

    def count(self, lesson: str | None = None) -> int:
        with closing(self._connect()) as db:
            if lesson is None:
                return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
            return db.execute("SELECT COUNT(*) FROM answers WHERE lesson = ?", (lesson,)).fetchone()[0]

    def clear(self, lesson: str | None = None) -> int:
        """Delete a lesson's answers (all answers when lesson is None); returns how many were deleted."""
        with closing(self._connect()) as db:
            cur = db.execute("DELETE FROM answers" + ("" if lesson is None else " WHERE lesson = ?"),
                             () if lesson is None else (lesson,))
            return cur.rowcount


def _step_order(step: str):
    return (0, int(step)) if str(step).isdigit() else (1, str(step))


# --- a student's own answers ----------------------------------------------------------------------------------------
def answer_row(fact: str, step: int, question: str, grade: dict) -> dict:
    """One answer as the student's download lists it."""
    return {"fact": fact, "step": step, "question": question, "answer": grade["choice"], "verdict": grade["verdict"],
            "score": grade["score"], "truth": grade["truth"], "at": time.strftime("%Y-%m-%d %H:%M:%S")}


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def to_json(rows: list[dict]) -> str:
    return json.dumps({"answers": rows, "right": sum(r["verdict"] == "right" for r in rows),
                       "score": sum(r["score"] for r in rows)}, indent=1, ensure_ascii=False)
