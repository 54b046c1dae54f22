// Copies what tsc does not: every file under src/ that is not TypeScript (SQL migrations and
// queries, Lua scripts, and whatever asset a module loads from beside itself), next to the compiled
// modules that load them. Copying by "not .ts" rather than by folder name means a new kind of
// asset cannot be left out of the package; the pack test checks the tarball holds each one.
import { copyFileSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";

// The dashboard's browser code is not an asset: scripts/build-dashboard.mjs bundles it.
const BUNDLED = join("src", "dashboard", "client");

function walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (path !== BUNDLED) walk(path);
    } else if (!entry.name.endsWith(".ts") && !entry.name.endsWith(".md")) {
      mkdirSync(dirname(join("dist", path)), { recursive: true });
      copyFileSync(path, join("dist", path));
    }
  }
}
if (existsSync("src")) walk("src");
