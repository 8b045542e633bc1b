#!/usr/bin/env python3
"""Drive `gyre mcp` over stdio with a scripted list of tool calls and record the transcript.

Usage: mcp_session.py --gyre BIN --out TRANSCRIPT.jsonl [--env K=V ...] STEPS.json
STEPS.json: [{"tool": NAME, "arguments": {...}}, ...]; "$OUT" in a string argument is replaced by
the transcript's folder. Every request and response is appended to the transcript (one JSON object
per line); a short line per call is printed. Stdlib only (the GPU machine has no MCP SDK): this is
a plain JSON-RPC 2.0 client of the protocol `gyre mcp` speaks, used for the worked example of
issue 16. Exit 1 when a call fails (protocol error or isError).
"""
import argparse, json, os, subprocess, sys, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyre", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("steps")
    a = ap.parse_args()
    outdir = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(outdir, exist_ok=True)
    env = dict(os.environ)
    for kv in a.env:
        k, v = kv.split("=", 1)
        env[k] = v
    steps = json.load(open(a.steps))
    p = subprocess.Popen([a.gyre, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=env)
    log = open(a.out, "w")
    next_id = [0]

    def rpc(method, params=None):
        next_id[0] += 1
        msg = {"jsonrpc": "2.0", "id": next_id[0], "method": method}
        if params is not None:
            msg["params"] = params
        t0 = time.time()
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("gyre mcp closed its output")
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                break
        log.write(json.dumps({"request": msg, "response": reply, "seconds": round(time.time() - t0, 3)}) + "\n")
        log.flush()
        return reply

    rc = 0
    init = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "mcp_session.py", "version": "1"}})
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    p.stdin.flush()
    print(f'   mcp: {init["result"]["serverInfo"]["name"]} protocol {init["result"]["protocolVersion"]}, env {a.env}')
    for s in steps:
        args = json.loads(json.dumps(s.get("arguments", {})).replace("$OUT", outdir))
        r = rpc("tools/call", {"name": s["tool"], "arguments": args})
        if "error" in r:
            print(f'   {s["tool"]}: protocol error {r["error"]}')
            rc = 1
            continue
        res = r["result"]
        ok = not res.get("isError")
        rc |= 0 if ok else 1
        sc = res.get("structuredContent", {})
        brief = ""
        if s["tool"] == "advise":
            for f in sc.get("findings", [])[:4]:
                brief += f'\n      [{f["signal"]}] {f["at_stake_us"]/1000:.3f} ms {f["evidence"]} -> {f["skeletons"]}'
        elif s["tool"] == "analyze":
            for d in sc.get("devices", []):
                brief += (f'\n      GPU {d["device"]}: busy {d["busy_us"]/1000:.3f} of {d["window_us"]/1000:.3f} ms, '
                          f'largest gap {d["largest_gap_us"]:.0f} us')
            for o in sc.get("ops", []):
                if o["name"] in ("gemm.plan", "gemm.launch", "kda.in_proj", "cuda.launch"):
                    brief += f'\n      {o["name"]}: {o["count"]} x, self {o["self_us"]/1000:.3f} ms'
        elif s["tool"] == "skeletons":
            brief = " " + ", ".join(x["name"] for x in sc.get("result", []))
        elif s["tool"] == "verify_model":
            brief = f' pass={sc.get("pass")}'
        print(f'   {s["tool"]}: {"ok" if ok else "FAILED"}{brief}')
        if not ok:
            print("      " + res["content"][0]["text"][-800:].replace("\n", "\n      "))
    p.stdin.close()
    p.wait(timeout=600)
    return rc


if __name__ == "__main__":
    sys.exit(main())
