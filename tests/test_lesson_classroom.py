"""The class's answers in SQLite: WAL mode, many students writing at once from threads (every answer counted, none
lost, a later answer replacing the earlier one), counts per step, clearing; a student's own answers as CSV / JSON."""
import csv
import io
import json
import random
import sqlite3
import threading

from editkit.lesson.classroom import ClassStore, answer_row, to_csv, to_json

STEPS = [str(n) for n in range(1, 11)]


def test_concurrent_writers_lose_nothing(tmp_path):
    store = ClassStore(tmp_path / "class.sqlite3")
    with sqlite3.connect(tmp_path / "class.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    students = 30
    errors = []
    start = threading.Barrier(students)

    def student(i: int) -> None:
        rnd = random.Random(i)
        store_i = ClassStore(tmp_path / "class.sqlite3")  # one store object per student, as separate sessions
        try:
            start.wait()
            for step in rnd.sample(STEPS, len(STEPS)):
                store_i.record("lesson", "eiffel", step, f"s{i}", "first try", "wrong", 0.0)
            for step in STEPS:  # answering again replaces the first answer
                verdict = "right" if (i + int(step)) % 3 else "close"
                store_i.record("lesson", "eiffel", step, f"s{i}", f"answer {i % 4}", verdict,
                               1.0 if verdict == "right" else 0.5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(students)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.count("lesson") == students * len(STEPS)
    rows = store.summary("lesson")
    assert [r["step"] for r in rows] == STEPS  # in step order, 10 after 9
    for r in rows:
        step = int(r["step"])
        right = sum(1 for i in range(students) if (i + step) % 3)
        assert r["students"] == students and r["right"] == right and r["close"] == students - right
        assert r["wrong"] == 0 and sum(r["answers"].values()) == students
        assert abs(r["mean_score"] - (right + 0.5 * (students - right)) / students) < 1e-9
        assert set(r["answers"]) == {f"answer {k}" for k in range(4)}
        assert r["first"] == {"right": 0, "close": 0, "wrong": students}  # every first try was wrong, and stays so


def test_the_first_answer_is_kept_and_an_old_store_gains_the_column(tmp_path):
    """'Answer again' replaced a student's first answer, so the teacher never saw the class's predictions; the
    first verdict is kept beside the latest, and a store made before (no first columns) opens and counts its rows'
    latest answers as their first."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE answers (lesson TEXT NOT NULL, fact TEXT NOT NULL, step TEXT NOT NULL, student TEXT "
                   "NOT NULL, answer TEXT NOT NULL, verdict TEXT NOT NULL, score REAL NOT NULL, at REAL NOT NULL, "
                   "PRIMARY KEY (lesson, fact, step, student))")
        db.execute("INSERT INTO answers VALUES ('l', 'f', '2', 'old', 'layer 4', 'right', 1.0, 0)")
    store = ClassStore(path)
    store.record("l", "f", "2", "s1", "layer 9", "wrong", 0.0)
    store.record("l", "f", "2", "s1", "layer 3", "close", 0.5)
    store.record("l", "f", "2", "s1", "layer 4", "right", 1.0)
    store.record("l", "f", "2", "s2", "layer 4", "right", 1.0)
    (row,) = store.summary("l")
    assert row["students"] == 3 and row["right"] == 3 and row["answers"] == {"layer 4": 3}
    assert row["first"] == {"right": 2, "close": 0, "wrong": 1}
    assert store.count("l") == 3


def test_lessons_are_separate_and_cleared(tmp_path):
    store = ClassStore(tmp_path / "c.sqlite3")
    store.record("a", "f", "1", "s1", "layer 3", "right", 1.0)
    store.record("b", "f", "1", "s1", "layer 5", "wrong", 0.0)
    assert store.summary("a")[0]["answers"] == {"layer 3": 1}
    assert store.clear("a") == 1 and store.summary("a") == [] and store.count("b") == 1
    assert store.clear() == 1 and store.count() == 0


def test_a_students_own_answers_download():
    g = {"choice": "layer 3", "verdict": "right", "score": 1.0, "truth": "layer 3", "feedback": "..."}
    rows = [answer_row("eiffel", 1, "At which layer ...?", g),
            answer_row("eiffel", 2, "Which cell, \"before\" the last token?", {**g, "verdict": "wrong",
                                                                                 "score": 0.0})]
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert [r["verdict"] for r in parsed] == ["right", "wrong"] and parsed[1]["question"].startswith("Which cell")
    data = json.loads(to_json(rows))
    assert data["right"] == 1 and data["score"] == 1.0 and len(data["answers"]) == 2
