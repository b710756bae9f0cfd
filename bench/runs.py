"""What the table makers of the benchmark scripts share: runs grouped by case and phase,
the runs that succeeded, the JSON each printed. Imported from bench/ (BENCH_DIR)."""
import json


def group(rows, key):
    """The cases in first-seen order, and the runs of each (case..., phase)."""
    order, runs = [], {}
    for r in rows:
        k = key(r)
        if k not in order:
            order.append(k)
        runs.setdefault(k + (r["phase"],), []).append(r)
    return order, runs


def ok_runs(runs, k, phase):
    """The runs of case k's phase that succeeded, and how many did not."""
    rs = runs.get(k + (phase,), [])
    ok = [r for r in rs if r["status"] == "ok"]
    return ok, len(rs) - len(ok)


def outputs(ok):
    """The JSON each run printed; a run whose output is not JSON is left out."""
    js = []
    for r in ok:
        try:
            js.append(json.load(open(r["out"])))
        except Exception:
            pass
    return js
