// `npm run bench -- [options]` runs bench/run.ts; `node scripts/bench.mjs bench/<name>.ts [options]`
// runs another benchmark of bench/.
//
// Both run the JavaScript that tsc compiles from the sources (tsconfig.bench.json, into
// .tmp/bench-build, incrementally: a second run recompiles only what changed), as the published
// package is compiled, not the sources through tsx: the peers run their published JavaScript, and
// so does Conveyor here. tsx's transform keeps every function's name by wrapping it (esbuild
// `keepNames`: an Object.defineProperty each time a closure is made), which the worker's hot paths
// paid per job in the benchmarks only (1-5% of the process's CPU in profiles; level within this
// machine's spread in throughput: docs/performance-sqlite.md, "Session 16").
//
// A comparison of two checkouts (--ab, --main, --tree, --base, and the benchmarks of SOURCES_ONLY)
// loads the other checkout's sources, which only tsx can: then every side runs through tsx, like
// with like.
import { spawn, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { copyAssets } from "./copy-assets.mjs";

const OUT_DIR = ".tmp/bench-build";
const TWO_CHECKOUTS = ["--ab", "--main", "--tree", "--base"];
// Comparisons of checkouts that load every side, this one included, from its sources by path.
const SOURCES_ONLY = ["bench/ab-redis.ts", "bench/ab-script-cost.ts", "bench/flowctl-claim-loop.ts", "bench/sqlite-flow-wal-pages.ts"];

const args = process.argv.slice(2);
const file = args[0]?.endsWith(".ts") ? args.shift() : "bench/run.ts";
if (!/^bench\/[\w-]+\.ts$/.test(file)) {
  console.error(`scripts/bench.mjs: expected a benchmark as bench/<name>.ts, got ${JSON.stringify(file)}`);
  process.exit(2);
}

let command;
if (SOURCES_ONLY.includes(file) || args.some((a) => TWO_CHECKOUTS.includes(a.split("=")[0]))) {
  console.error(`bench: ${file} ${args.join(" ")} loads checkouts' sources: every side runs through tsx`);
  command = ["--import", "tsx", file, ...args];
} else {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const built = spawnSync(process.execPath, [tsc, "-p", "tsconfig.bench.json"], { stdio: "inherit" });
  if (built.status !== 0) {
    console.error("bench: the sources did not compile (tsc above); nothing was measured");
    process.exit(built.status ?? 1);
  }
  // SQL, Lua and the other files modules read from beside themselves (testkit's too).
  copyAssets(OUT_DIR, ["src", "testkit"]);
  command = [`${OUT_DIR}/${file.replace(/\.ts$/, ".js")}`, ...args];
}

const child = spawn(process.execPath, command, { stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal));
child.on("exit", (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)));
