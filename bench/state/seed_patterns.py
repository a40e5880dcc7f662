"""The seed's own durable-state patterns, timed for comparison with stead's
checkpoint commit (bench/state): a JSON file written and renamed into place
(with fsync of the file and of the directory, so it is as durable as a
stead commit), and an INSERT into a SQLite database in WAL mode with
synchronous=FULL. Prints one line per pattern: name p50_ms p99_ms."""
import json, os, sqlite3, sys, tempfile, time


def pct(xs, p):
    xs = sorted(xs)
    return xs[int((len(xs) - 1) * p)]


def json_rename(n, d):
    path = os.path.join(d, "state.json")
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": i, "notes": "x" * 200}, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        out.append(time.perf_counter() - t0)
    return out


def sqlite_wal(n, d):
    db = sqlite3.connect(os.path.join(d, "state.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS checkpoints (step INTEGER, doc TEXT)")
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        db.execute("BEGIN")
        db.execute("INSERT INTO checkpoints VALUES (?, ?)", (i, json.dumps({"step": i, "notes": "x" * 200})))
        db.execute("COMMIT")
        out.append(time.perf_counter() - t0)
    return out


n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
d = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
for name, fn in (("python json write+fsync+rename", json_rename), ("python sqlite WAL insert (synchronous=FULL)", sqlite_wal)):
    xs = fn(n, d)
    print("%s\t%.3f\t%.3f" % (name, pct(xs, 0.5) * 1000, pct(xs, 0.99) * 1000))
