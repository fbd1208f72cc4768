// Builds ../rules/static/rules/vendor/codemirror/editor.bundle.js from src/editor.js with esbuild, and writes
// the licenses of exactly the packages that went into it (from esbuild's metafile) beside it.
// Run through `make editor-bundle` (npm ci first, so the versions are package-lock.json's).
import { build } from "esbuild";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const out = "../rules/static/rules/vendor/codemirror";
const result = await build({
  entryPoints: ["src/editor.js"],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2020",
  legalComments: "none",
  metafile: true,
  outfile: join(out, "editor.bundle.js"),
});

// node_modules/<name> or node_modules/@scope/<name> of every input file of the bundle.
const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  const match = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
  if (match) packages.add(match[1]);
}
const parts = [
  "Licenses of the packages bundled into editor.bundle.js (written by frontend/build.mjs).\n",
];
for (const name of [...packages].sort()) {
  const dir = join("node_modules", name);
  const meta = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const file = readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
  if (!file) throw new Error(`${name} has no license file`);
  parts.push(`\n==== ${name}@${meta.version} (${meta.license}) ====\n\n${readFileSync(join(dir, file), "utf8").trim()}\n`);
}
writeFileSync(join(out, "LICENSES.txt"), parts.join(""));
const size = readFileSync(join(out, "editor.bundle.js")).length;
console.log(`editor.bundle.js: ${size} bytes from ${packages.size} packages`);
