// Bundles the web dashboard (src/dashboard/client) into dist/src/dashboard/assets with esbuild:
// one minified script and one stylesheet, every dependency inside, nothing fetched at run time.
// Fails when the gzipped total passes the budget of 150 KB. `--out DIR` writes elsewhere. Sizes go
// to stderr: stdout stays clean for `npm pack --json`, whose prepack runs this build.
import { build } from "esbuild";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

const BUDGET_BYTES = 150 * 1024;
const outIndex = process.argv.indexOf("--out");
const outdir = outIndex > 0 ? process.argv[outIndex + 1] : join("dist", "src", "dashboard", "assets");
mkdirSync(outdir, { recursive: true });

const common = { bundle: true, minify: true, legalComments: "none", logLevel: "warning", target: ["chrome111", "firefox115", "safari16.4"] };
await build({
  ...common,
  entryPoints: ["src/dashboard/client/main.tsx"],
  outfile: join(outdir, "app.js"),
  format: "esm",
  jsx: "automatic",
  jsxImportSource: "preact",
  tsconfig: "src/dashboard/client/tsconfig.json",
});
await build({ ...common, entryPoints: ["src/dashboard/client/styles.css"], outfile: join(outdir, "app.css") });

let total = 0;
for (const file of ["app.js", "app.css"]) {
  const body = readFileSync(join(outdir, file));
  const gz = gzipSync(body, { level: 9 }).length;
  total += gz;
  console.error(`dashboard ${file}: ${(body.length / 1024).toFixed(1)} KB, ${(gz / 1024).toFixed(1)} KB gzipped`);
}
console.error(`dashboard total: ${(total / 1024).toFixed(1)} KB gzipped (budget ${BUDGET_BYTES / 1024} KB)`);
if (total > BUDGET_BYTES) {
  console.error("the dashboard bundle is over its budget; drop a dependency or split the code");
  process.exit(1);
}
