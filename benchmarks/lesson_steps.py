"""The Lesson page's step latency on the shipped pack: for each of steps 1-10 (not step 11), the script run that
opens it and the one that reveals its result (a right answer checked), in Streamlit's AppTest (one session, no
browser: the server's side of a click). Prints one JSON line: per step open_s and reveal_s, their median and
maximum. Run by `python -m editkit bench report` (its "lesson steps" section); on its own: `python
benchmarks/lesson_steps.py`. The load test (benchmarks/load/lesson_load.py) measures thirty students at once."""
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> dict:
    from streamlit.testing.v1 import AppTest

    from editkit.lesson.pack import SHIPPED, Pack
    from lesson_util import answers_for

    os.environ.setdefault("EDITKIT_LESSON", str(SHIPPED))
    os.environ["EDITKIT_CACHE"] = tempfile.mkdtemp(prefix="editkit-steps-")  # a fresh class database only
    os.environ.pop("EDITKIT_TEACHER_PASSPHRASE", None)
    pack = Pack.open(os.environ["EDITKIT_LESSON"])
    fid = pack.fact_ids[0]
    specs = answers_for(pack, fid)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.switch_page("pages/lesson.py").run()
    at.selectbox(key="lesson_fact").set_value(fid).run()
    rows = []
    for step in range(1, 11):
        t0 = time.perf_counter()
        at.radio(key="lesson_step").set_value(step).run()
        opened = time.perf_counter() - t0
        spec = specs[step]
        if spec[0] == "cell":
            at.selectbox(key=f"lesson_q{spec[1]}_token_{fid}").set_value(spec[-2][0])
            at.number_input(key=f"lesson_q{spec[1]}_layer_{fid}").set_value(spec[-2][1])
        else:
            getattr(at, spec[0])(key=spec[1]).set_value(spec[-2])
        t0 = time.perf_counter()
        next(b for b in at.button if b.label == "Check my answer").click().run()
        rows.append({"step": step, "open_s": round(opened, 3), "reveal_s": round(time.perf_counter() - t0, 3)})
        if at.exception:
            raise SystemExit(f"step {step}: {at.exception[0].value}")
    runs = [r[k] for r in rows for k in ("open_s", "reveal_s")]
    return {"pack": str(pack.folder), "fact": fid, "rows": rows, "p50_s": round(statistics.median(runs), 3),
            "max_s": round(max(runs), 3)}


if __name__ == "__main__":
    print(json.dumps(main()))
