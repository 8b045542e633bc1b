// Renders every (chat template, case) pair with @huggingface/jinja and writes the expected outputs
// that src/serve/chat_template_test.cc compares against byte for byte.
//
// Usage (see src/serve/testdata/chat_templates/README.md):
//   node tools/jinja_ref/render.mjs <templates_dir> <cases.json> <expected.json> [node_modules_dir]
//
// Every *.jinja file in <templates_dir> is a template named after the file (without .jinja). A case's
// context is cases.template_vars[name] (or template_vars.default) overlaid with cases.cases[case].
// strftime_now() is pinned to 2026-01-15 10:30 so that outputs do not depend on the clock; the C++
// test pins the same time through ChatTemplate::RenderOptions.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [templatesDir, casesPath, outPath, nodeModulesArg] = process.argv.slice(2);
if (!templatesDir || !casesPath || !outPath) {
  console.error("usage: node render.mjs <templates_dir> <cases.json> <expected.json> [node_modules_dir]");
  process.exit(2);
}
const nodeModules = nodeModulesArg ?? path.resolve("node_modules");
const jinjaEntry = path.join(nodeModules, "@huggingface/jinja/dist/index.js");
const { Template, Environment, Interpreter } = await import(pathToFileURL(jinjaEntry).href);
const jinjaVersion = JSON.parse(
  fs.readFileSync(path.join(nodeModules, "@huggingface/jinja/package.json"), "utf8"),
).version;

// The pinned clock: Thursday 2026-01-15 10:30:00.
const kMonths = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
  "October", "November", "December"];
const kDays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const kNow = { year: 2026, month: 0, day: 15, weekday: 4, hour: 10, minute: 30, second: 0 };
const pad2 = (n) => String(n).padStart(2, "0");
function strftimeNow(format) {
  const map = {
    Y: String(kNow.year), m: pad2(kNow.month + 1), d: pad2(kNow.day), H: pad2(kNow.hour),
    M: pad2(kNow.minute), S: pad2(kNow.second), b: kMonths[kNow.month].slice(0, 3), B: kMonths[kNow.month],
    a: kDays[kNow.weekday].slice(0, 3), A: kDays[kNow.weekday], y: pad2(kNow.year % 100), "%": "%",
  };
  return String(format).replace(/%([a-zA-Z%])/g, (m, c) => map[c] ?? m);
}

// raise_exception() errors are part of a template's contract and are kept as goldens; other errors
// (features @huggingface/jinja lacks) are listed under "skipped".
class RaisedError extends Error {}

// Mirrors @huggingface/jinja's Template.render() (setupGlobals), except that strftime_now is pinned.
function pyRange(start, stop, step = 1) {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() step must not be zero");
  const out = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}
function render(template, context) {
  const env = new Environment();
  const globals = {
    false: false, true: true, none: null, True: true, False: false, None: null,
    raise_exception: (msg) => { throw new RaisedError(msg); },
    range: pyRange,
    strftime_now: strftimeNow,
  };
  for (const [key, value] of Object.entries({ ...globals, ...context })) env.set(key, value);
  return new Interpreter(env).run(template.parsed).value;
}

const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const names = fs.readdirSync(templatesDir).filter((f) => f.endsWith(".jinja")).sort();
const results = [];
const skipped = [];
for (const file of names) {
  const name = file.slice(0, -".jinja".length);
  const source = fs.readFileSync(path.join(templatesDir, file), "utf8");
  let template;
  try {
    template = new Template(source);
  } catch (e) {
    console.error(`${name}: does not compile: ${e.message}`);
    skipped.push({ template: name, case: null, reason: String(e.message) });
    continue;
  }
  const vars = cases.template_vars[name] ?? cases.template_vars.default;
  for (const [caseName, ctx] of Object.entries(cases.cases)) {
    const context = { ...vars, ...structuredClone(ctx) };
    try {
      results.push({ template: name, case: caseName, output: render(template, context) });
    } catch (e) {
      if (e instanceof RaisedError) {
        results.push({ template: name, case: caseName, raised: String(e.message) });
      } else {
        skipped.push({ template: name, case: caseName, reason: String(e.message) });
      }
    }
  }
}
const doc = {
  generator: `tools/jinja_ref/render.mjs with @huggingface/jinja ${jinjaVersion}`,
  results,
  skipped,
};
fs.writeFileSync(outPath, JSON.stringify(doc, null, 1) + "\n");
const raised = results.filter((r) => "raised" in r).length;
console.log(`wrote ${results.length} results (${raised} raise_exception) to ${outPath}; skipped ${skipped.length}`);
