// Copies what tsc does not: every file under src/ that is not TypeScript (SQL migrations and
// queries, Lua scripts, and whatever asset a module loads from beside itself), next to the compiled
// modules that load them. Copying by "not .ts" rather than by folder name means a new kind of
// asset cannot be left out of the package; the pack test checks the tarball holds each one.
// `node scripts/copy-assets.mjs` copies src/ into dist/ (the package build); scripts/bench.mjs
// calls copyAssets for its own compiled tree.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

// The dashboard's browser code is not an asset: scripts/build-dashboard.mjs bundles it.
const BUNDLED = join("src", "dashboard", "client");

/** What tsc writes: every other file under a compiled tree is a copied asset. */
const COMPILED = /\.(js|js\.map|d\.ts|d\.ts\.map|tsbuildinfo)$/;

/**
 * Copies every non-TypeScript file under each of `folders` (relative to the cwd) into `outDir`, same
 * paths, and first removes the copies whose source is gone: the migrations are found by listing
 * their folder, so a migration left from another branch's build would be applied (it was, to a
 * bench's database: docs/performance-postgres.md, "Session 31"). Only folders that exist in the
 * source are pruned: other build steps write folders of their own beside the copies (the
 * dashboard's bundle, the API docs' files), which have no source folder and are left alone.
 */
export function copyAssets(outDir, folders) {
  const prune = (dir) => {
    const source = relative(outDir, dir);
    if (!existsSync(source)) return;
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) prune(path);
      else if (!COMPILED.test(entry.name) && !existsSync(join(source, entry.name))) rmSync(path);
    }
  };
  for (const folder of folders) if (existsSync(join(outDir, folder))) prune(join(outDir, folder));
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (path !== BUNDLED) walk(path);
      } else if (!entry.name.endsWith(".ts") && !entry.name.endsWith(".md")) {
        mkdirSync(dirname(join(outDir, path)), { recursive: true });
        copyFileSync(path, join(outDir, path));
      }
    }
  };
  for (const folder of folders) if (existsSync(folder)) walk(folder);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) copyAssets("dist", ["src"]);
