#!/usr/bin/env python3
"""A trace window of a running GPU server (scripts/gpu_check.sh step `trace`).

Starts `gyre serve --backend cuda --trace-dir DIR` on the trained fixture, opens a window with
POST /debug/trace {"seconds": S} while 8 concurrent completions run, and checks: the window
answers 200 with the trace path, the file holds CPU spans and device records (the device timeline
of a live server, without a restart), a second window while one records is refused with 409, and
the server still serves afterwards. Then `gyre analyze` on the window. Writes a JSON report; exit 1
when a check fails. Stdlib only.
"""
import argparse, json, os, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_check import start, req  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyre", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="tests/fixtures/glm5_mini")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--backend", default="cuda", help="cpu runs the same checks without device records")
    a = ap.parse_args()
    tdir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "trace", "serve_window")
    os.makedirs(tdir, exist_ok=True)
    p, port, lines = start(a.gyre, ["--backend", a.backend, "--model", a.model, "--trace-dir", tdir],
                           os.path.join(os.path.dirname(os.path.abspath(a.out)), "trace_window_server.log"))
    checks, rep = [], {"banner": lines}
    def check(name, ok, detail):
        checks.append({"name": name, "pass": bool(ok), "detail": detail})
        print(f'   {name:24s} {"PASS" if ok else "FAIL"}  {detail}')
    try:
        window = {}
        t = threading.Thread(target=lambda: window.update(
            zip(("status", "body"), req(port, "POST", "/debug/trace", {"seconds": a.seconds}))))
        t.start()
        time.sleep(0.2)
        busy = req(port, "POST", "/debug/trace", {"seconds": 1})
        results = []
        def one(i):
            results.append(req(port, "POST", "/v1/completions",
                               {"prompt": f"The history of the river {i}", "max_tokens": 32, "temperature": 0})[0])
        workers = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for w in workers: w.start()
        for w in workers: w.join()
        t.join()
        check("window.status", window.get("status") == 200, f'{window.get("status")} {str(window.get("body"))[:200]}')
        check("window.busy_is_409", busy[0] == 409, f"second window while recording: {busy[0]}")
        check("requests", results.count(200) == 8, f"{results.count(200)}/8 completions answered 200 during the window")
        path = window.get("body", {}).get("path", "") if isinstance(window.get("body"), dict) else ""
        ev = []
        if path and os.path.exists(path):
            ev = json.load(open(path))["traceEvents"]
        dev = [e for e in ev if e.get("ph") == "X" and e.get("pid", 1) >= 100]
        cpu = [e for e in ev if e.get("ph") == "X" and e.get("pid", 1) < 100]
        launched = sum(1 for e in dev if e.get("args", {}).get("span"))
        check("window.trace", (len(dev) > 0 or a.backend == "cpu") and len(cpu) > 0,
              f"{len(cpu)} CPU spans, {len(dev)} device records ({launched} with their launching span) in {path}")
        after = req(port, "POST", "/v1/completions", {"prompt": "After", "max_tokens": 4})[0]
        check("serves_after", after == 200, f"completion after the window: {after}")
        if path:
            an = subprocess.run([a.gyre, "analyze", path, "--overlap", "memcpy,kernel", "--json"],
                                capture_output=True, text=True, timeout=120)
            rep["analyze"] = json.loads(an.stdout) if an.returncode == 0 else an.stderr[-2000:]
            txt = subprocess.run([a.gyre, "analyze", path, "--top", "10"], capture_output=True, text=True, timeout=120)
            open(path + ".analyze.txt", "w").write(txt.stdout)
            for line in txt.stdout.splitlines():
                if line.startswith("  GPU") or line.startswith("    gap"):
                    print("   " + line)
    finally:
        p.terminate()
        p.wait(timeout=30)
    rep["checks"] = checks
    rep["pass"] = all(c["pass"] for c in checks)
    json.dump(rep, open(a.out, "w"), indent=1)
    return 0 if rep["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
