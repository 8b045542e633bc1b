#!/usr/bin/env python3
"""Re-renders the chat template goldens with Python jinja2 the way transformers does, and reports
where Python and @huggingface/jinja (expected.json, written by render.mjs) disagree.

Usage: python3 tools/jinja_ref/crosscheck.py <templates_dir> <cases.json> <expected.json> [-v]
           [--write-python <out.json>]

With --write-python, also writes Python's outputs in expected.json's format (for comparing the C++
engine's RenderOptions::python_str mode against Python).

The environment mirrors transformers.utils.chat_template_utils._compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols, a
`{% generation %}` tag, a tojson filter that calls json.dumps(ensure_ascii=False), and the globals
raise_exception and strftime_now (pinned to 2026-01-15 10:30 like render.mjs).
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2026, 1, 15, 10, 30, 0).strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    templates_dir, cases_path, expected_path = sys.argv[1:4]
    verbose = "-v" in sys.argv[4:]
    write_python = sys.argv[sys.argv.index("--write-python") + 1] if "--write-python" in sys.argv else None
    python_results = []
    cases = json.load(open(cases_path, encoding="utf-8"))
    expected = json.load(open(expected_path, encoding="utf-8"))["results"]  # skipped entries are not here
    env = make_env()
    compiled = {}
    agree = disagree = 0
    for r in expected:
        name, case = r["template"], r["case"]
        if case is None:
            continue
        if name not in compiled:
            with open(os.path.join(templates_dir, name + ".jinja"), encoding="utf-8") as f:
                compiled[name] = env.from_string(f.read())
        ctx = dict(cases["template_vars"].get(name, cases["template_vars"]["default"]))
        ctx.update(json.loads(json.dumps(cases["cases"][case])))
        try:
            out, err = compiled[name].render(**ctx), None
        except Exception as e:  # noqa: BLE001 - report any render failure
            out, err = None, f"{type(e).__name__}: {e}"
        python_results.append({"template": name, "case": case, **({"output": out} if err is None else {"error": err})})
        if "raised" in r:
            ok = err == "TemplateError: " + r["raised"]
        else:
            ok = err is None and out == r["output"]
        if ok:
            agree += 1
            continue
        disagree += 1
        print(f"DIFF {name} / {case}")
        if verbose:
            print("  huggingface:", json.dumps(r.get("output", "RAISED " + r.get("raised", "")))[:2000])
            print("  python     :", json.dumps(out if err is None else "ERROR " + err)[:2000])
    print(f"{agree} agree, {disagree} differ")
    if write_python:
        with open(write_python, "w", encoding="utf-8") as f:
            json.dump({"generator": f"tools/jinja_ref/crosscheck.py with jinja2 {jinja2.__version__}",
                       "results": python_results}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
