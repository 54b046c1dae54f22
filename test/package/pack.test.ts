/**
 * The package as a user installs it: `npm pack` from a clean clone (no dist/), the tarball
 * installed into a fresh project together with the peers a user adds, then every entry point used
 * the way users use it: ESM import and CommonJS require() of every subpath, a TypeScript consumer
 * compiled under node16 and bundler resolution, the `conveyor` bin end to end on SQLite, and the
 * packaging linters (publint, arethetypeswrong).
 *
 * `.ci/run` runs this file again under Node 22 (the oldest supported line); the Node that runs the
 * test is the one every command here uses.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { devVersion, must, packFromCleanClone, ROOT, run, spawnIn, type Packed } from "./install.js";

/** What each subpath must export at least; a new subpath must be added here (the test says so). */
const EXPECTED_EXPORTS: Record<string, string[]> = {
  ".": ["Queue", "Worker", "defineJob", "UnrecoverableError", "RetryLater", "installShutdownSignals"],
  "./sqlite": ["SqliteBackend"],
  "./postgres": ["PostgresBackend"],
  "./redis": ["RedisBackend"],
  "./amqp": ["AmqpBackend"],
  "./http": ["createServer", "conveyorHttp", "verifyWebhook"],
  "./testing": ["createTestBackend", "drain", "FakeClock"],
  "./metrics": ["ConveyorMetrics", "ConveyorTracing", "desiredWorkers"],
  "./outbox": ["PostgresOutbox", "SqliteOutbox", "Relay", "QueueTarget", "AmqpTarget", "KafkaTarget"],
  "./kafka": ["KafkaWorker", "KAFKA_HEADERS"],
};

/** The peers a user of every subpath adds, at the versions the repository tests with. */
const PEERS = ["better-sqlite3", "pg", "ioredis", "fastify", "prom-client", "@opentelemetry/api", "amqplib", "pg-logical-replication", "kafkajs"];
/** What a TypeScript user adds to compile against the declarations (skipLibCheck off). */
const TYPES = ["typescript", "@types/node", "@types/pg", "@types/better-sqlite3"];

const temp = new TempDirs("conveyor-pack-");
/** Per-test limit, ms: these run npm, tsc and child processes, slow on a loaded 2-core machine. */
const SLOW = 150_000;
let packed: Packed;
let app: string;
/** The installed package's `exports` map. */
let installed: Record<string, string | Record<string, string>>;

beforeAll(async () => {
  const work = await temp.make();
  packed = await packFromCleanClone(work);
  app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "pack-test-app", private: true, type: "module" }, null, 2));
  await must("npm", ["install", "--no-save", "--loglevel=error", packed.tarball, ...[...PEERS, ...TYPES].map(devVersion)], app);
  const manifest = JSON.parse(readFileSync(join(app, "node_modules/conveyor-jobs/package.json"), "utf8")) as {
    exports: Record<string, string | Record<string, string>>;
  };
  installed = manifest.exports;
}, 240_000);

afterAll(() => temp.removeAll());

/** The dashboard's browser sources: bundled into dist/src/dashboard/assets, not copied. */
const DASHBOARD_CLIENT = join(ROOT, "src", "dashboard", "client");

/** Non-TypeScript files under src/: what the compiled modules read from beside themselves. */
function sourceAssets(dir = join(ROOT, "src")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return path === DASHBOARD_CLIENT ? [] : sourceAssets(path);
    return entry.name.endsWith(".ts") || entry.name.endsWith(".md") ? [] : [relative(ROOT, path)];
  });
}

function subpaths(): string[] {
  const names = Object.keys(installed).filter((s) => s !== "./package.json");
  for (const name of names) {
    if (!EXPECTED_EXPORTS[name]) throw new Error(`package.json exports ${name}: add what it must export to EXPECTED_EXPORTS in this test`);
  }
  return names;
}

describe("the packed tarball", () => {
  it("holds exactly the compiled modules, their declarations, every asset, the bin and the docs", () => {
    const files = new Set(packed.files);
    // The API docs' browser files (Swagger UI, with its licence), copied by scripts/copy-api-docs.mjs.
    const apiDocs = ["swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "NOTICE"].map((f) => `dist/src/http/api-docs/${f}`);
    for (const must of [
      "package.json",
      "README.md",
      "LICENSE",
      "CHANGELOG.md",
      "bin/conveyor.js",
      "dist/src/cli/bin.js",
      "dist/src/dashboard/assets/app.js",
      "dist/src/dashboard/assets/app.css",
      ...apiDocs,
    ]) {
      expect(files, must).toContain(must);
    }
    // Every export target ships (types and code).
    for (const target of Object.values(installed).flatMap((t) => (typeof t === "string" ? [t] : Object.values(t)))) {
      expect(files, target).toContain(target.replace(/^\.\//, ""));
    }
    // SQL migrations and queries, Lua scripts and any later asset: next to the compiled code.
    const assets = sourceAssets();
    expect(assets.length).toBeGreaterThan(10);
    for (const asset of assets) expect(files, `${asset} must be copied to dist by scripts/copy-assets.mjs`).toContain(`dist/${asset}`);
    // Nothing else: no sources, tests, maps, benchmarks or local files.
    const stray = packed.files.filter(
      (f) =>
        !["package.json", "README.md", "LICENSE", "CHANGELOG.md", "bin/conveyor.js", "dist/src/dashboard/assets/app.css", ...apiDocs].includes(f) &&
        !/^dist\/src\/.+\.(js|d\.ts|sql|lua)$/.test(f),
    );
    expect(stray).toEqual([]);
  });

  it("passes publint and arethetypeswrong (ESM-only profile)", { timeout: SLOW }, async () => {
    const publint = await run("npx", ["publint", "--strict", packed.tarball], ROOT);
    expect(publint.code, publint.stdout + publint.stderr).toBe(0);
    expect(publint.stdout).toContain("All good");
    const attw = await run("npx", ["attw", packed.tarball, "--profile", "esm-only", "--format", "ascii"], ROOT);
    expect(attw.code, attw.stdout + attw.stderr).toBe(0);
  });
});

describe("the examples", () => {
  it("import the package by name, mapped to the sources by tsconfig paths that match the exports", () => {
    const config = ts.readConfigFile(join(ROOT, "tsconfig.json"), (path) => ts.sys.readFile(path));
    const paths = (config.config as { compilerOptions: { paths: Record<string, string[]> } }).compilerOptions.paths;
    const exported = Object.keys(installed)
      .filter((s) => s !== "./package.json")
      .map((s) => `conveyor-jobs${s.slice(1)}`);
    expect(Object.keys(paths).sort()).toEqual(exported.sort());
    for (const [name, [target]] of Object.entries(paths)) {
      // The compiled file of each export is the source file the path names.
      const entry = installed[`.${name.slice("conveyor-jobs".length)}`] as Record<string, string>;
      expect(entry.default, name).toBe(target!.replace(/^\.\/src\//, "./dist/src/").replace(/\.ts$/, ".js"));
    }
    const relativeImports = readdirSync(join(ROOT, "examples"), { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".ts"))
      .filter((f) => /from "(\.\.\/)+src\//.test(readFileSync(join(ROOT, "examples", f), "utf8")));
    expect(relativeImports).toEqual([]);
  });
});

describe("installed into a fresh project", () => {
  it("imports every subpath from ESM", { timeout: SLOW }, async () => {
    const script = `
      const report = {};
      for (const sub of ${JSON.stringify(subpaths())}) report[sub] = Object.keys(await import("conveyor-jobs" + sub.slice(1)));
      console.log(JSON.stringify(report));`;
    writeFileSync(join(app, "imports.mjs"), script);
    const result = await must("node", ["imports.mjs"], app);
    const report = JSON.parse(result.stdout) as Record<string, string[]>;
    for (const sub of subpaths()) expect(report[sub], sub).toEqual(expect.arrayContaining(EXPECTED_EXPORTS[sub]!));
  });

  it("require()s every subpath from CommonJS, and the required code runs", { timeout: SLOW }, async () => {
    const script = `
      const report = {};
      for (const sub of ${JSON.stringify(subpaths())}) report[sub] = Object.keys(require("conveyor-jobs" + sub.slice(1)));
      const { Queue } = require("conveyor-jobs");
      const { SqliteBackend } = require("conveyor-jobs/sqlite");
      const backend = new SqliteBackend({ path: ":memory:" });
      new Queue("cjs", { backend }).add("hello", { from: "require" }).then(async (added) => {
        report.stored = (await backend.get(added.id)).data;
        await backend.close();
        console.log(JSON.stringify(report));
      });`;
    writeFileSync(join(app, "require.cjs"), script);
    const result = await must("node", ["require.cjs"], app);
    const report = JSON.parse(result.stdout) as Record<string, unknown>;
    for (const sub of subpaths()) expect(report[sub], sub).toEqual(expect.arrayContaining(EXPECTED_EXPORTS[sub]!));
    expect(report.stored).toEqual({ from: "require" });
  });

  // Concurrent: two tsc processes, one per core, instead of one after the other.
  it.concurrent.each(["node16", "bundler"])("compiles a TypeScript consumer under moduleResolution %s", { timeout: SLOW }, async (resolution) => {
    writeFileSync(
      join(app, `consumer-${resolution}.ts`),
      `import { Queue, Worker, defineJob, UnrecoverableError, type Job, type JobContext, type PayloadSchema } from "conveyor-jobs";
import { SqliteBackend } from "conveyor-jobs/sqlite";
import { PostgresBackend } from "conveyor-jobs/postgres";
import { RedisBackend } from "conveyor-jobs/redis";
import { createServer } from "conveyor-jobs/http";
import { createTestBackend, drain } from "conveyor-jobs/testing";

const backend = new SqliteBackend({ path: "jobs.db" });
const queue = new Queue("email", { backend });
const added: { id: string; duplicate: boolean } = await queue.add("welcome", { userId: "u_1" }, { attempts: 3 });
// @ts-expect-error a payload must be JSON: functions are refused by the types too
await queue.add("welcome", { callback: () => 1 });
// @ts-expect-error the backend is required
new Queue("email", {});
const handler = async (job: Job, ctx: JobContext): Promise<{ sent: boolean }> => {
  if (ctx.signal.aborted) throw new UnrecoverableError("stopped");
  return { sent: job.id === added.id };
};
const worker = new Worker({ backend, queues: "email", handlers: { welcome: handler }, autostart: false });
await worker.close();
// A payload schema without any schema library: the Standard Schema interface, typed from the package.
const welcomeSchema: PayloadSchema<{ userId: string }> = {
  "~standard": {
    version: 1,
    vendor: "consumer",
    validate: (value) =>
      typeof (value as { userId?: unknown })?.userId === "string" ? { value: value as { userId: string } } : { issues: [{ message: "userId must be a string", path: ["userId"] }] },
  },
};
const welcome = defineJob<{ userId: string }, { sent: boolean }>("welcome", welcomeSchema);
// @ts-expect-error the payload is typed by the definition
await queue.add(welcome, { userId: 1 });
// @ts-expect-error the handler's result is typed too
welcome.handle(async () => ({ sent: "yes" }));
const stored = welcome.narrow(await queue.getJob(added.id));
const sent: boolean | undefined = stored?.result?.sent;
worker.pause().then(() => worker.resume(), () => undefined);
await queue.close();
const _types: [typeof PostgresBackend, typeof RedisBackend, typeof createServer, typeof createTestBackend, typeof drain, typeof defineJob] = [
  PostgresBackend, RedisBackend, createServer, createTestBackend, drain, defineJob,
];
await backend.close();
`,
    );
    const module = resolution === "node16" ? "node16" : "esnext";
    writeFileSync(
      join(app, `tsconfig.${resolution}.json`),
      JSON.stringify({
        // node16 also checks every declaration file (ours and the peers'); bundler takes the usual
        // skipLibCheck, so the two compilations do not both pay for checking fastify's and pg's.
        compilerOptions: {
          module,
          moduleResolution: resolution,
          target: "es2022",
          strict: true,
          noEmit: true,
          skipLibCheck: resolution !== "node16",
          types: ["node"],
        },
        files: [`consumer-${resolution}.ts`],
      }),
    );
    const tsc = await run("npx", ["tsc", "-p", `tsconfig.${resolution}.json`], app);
    expect(tsc.stdout + tsc.stderr).toBe("");
    expect(tsc.code).toBe(0);
  });

  it("runs the conveyor bin: --version, migrate, enqueue, and a worker that finishes the job", { timeout: SLOW }, async () => {
    const version = await must("npx", ["conveyor", "--version"], app);
    expect(version.stdout.trim()).toBe(packed.version);

    const db = "sqlite:cli.db";
    const migrated = await run("npx", ["conveyor", "migrate", "--db", db], app);
    expect(migrated.code, migrated.stderr).toBe(0);
    const enqueued = await must("npx", ["conveyor", "enqueue", "--db", db, "--queue", "email", "--name", "welcome", "--data", '{"userId":"u_1"}'], app);
    const jobId = enqueued.stdout.trim();
    expect(jobId).toMatch(/\S/);

    writeFileSync(join(app, "handlers.js"), `export default { welcome: async (job) => ({ greeted: job.data.userId }) };\n`);
    // The bin npx runs, started directly: npm exec ends itself by the signal it forwards, which
    // would hide the worker's own exit code.
    const worker = spawnIn(join(app, "node_modules/.bin/conveyor"), ["worker", "--db", db, "--queue", "email", "--handlers", "./handlers.js"], app);
    try {
      const job = await waitFor(
        async () => {
          const shown = await run("npx", ["conveyor", "jobs", "show", jobId, "--db", db, "--json"], app);
          const record = JSON.parse(shown.stdout) as { state: string; result: unknown };
          return record.state === "completed" ? record : null;
        },
        { timeoutMs: 30_000, intervalMs: 200, description: `job ${jobId} completed by the installed worker` },
      );
      expect(job.result).toEqual({ greeted: "u_1" });
    } finally {
      worker.child.kill("SIGTERM");
    }
    expect(await worker.exited, worker.output()).toBe(0);
  });
});

/**
 * The README's quick start, extracted between its `quick-start` markers: `sh` blocks run in order
 * in one shell, a `js` block opening with `// NAME` is written to NAME, and the comment lines after
 * the last command are the output it must print. The one change: `npm install conveyor-jobs`
 * installs the tarball built above, since the test must not depend on what the registry holds.
 */
function quickStartScript(readme: string, tarball: string): { script: string; expected: string[] } {
  const begin = readme.indexOf("<!-- quick-start:begin -->");
  const end = readme.indexOf("<!-- quick-start:end -->");
  if (begin < 0 || end < begin) throw new Error("README.md has no <!-- quick-start:begin --> … <!-- quick-start:end --> section");
  const blocks = [...readme.slice(begin, end).matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, body: m[2]! }));
  const lines: string[] = ["set -euo pipefail"];
  let expected: string[] = [];
  for (const { lang, body } of blocks) {
    if (lang === "sh") {
      lines.push(body.replace(/^npm install conveyor-jobs /m, `npm install ${tarball} `));
      const comments = body.trimEnd().split("\n").reverse();
      const tail = comments
        .slice(
          0,
          comments.findIndex((l) => !l.startsWith("# ")),
        )
        .reverse();
      if (tail.length > 0) expected = tail.map((l) => l.slice(2));
    } else {
      const name = /^\/\/ (\S+)\n/.exec(body)?.[1];
      if (!name) throw new Error(`a ${lang} block of the quick start must open with // FILENAME`);
      lines.push(`cat > ${name} <<'QUICK_START_EOF'\n${body}QUICK_START_EOF`);
    }
  }
  return { script: lines.join("\n"), expected };
}

describe("the README quick start", () => {
  it("runs as written in an empty folder and prints what the README says", { timeout: SLOW }, async () => {
    const { script, expected } = quickStartScript(readFileSync(join(ROOT, "README.md"), "utf8"), packed.tarball);
    expect(script).toContain(packed.tarball);
    expect(expected.length).toBeGreaterThan(0);
    const folder = await temp.make();
    const result = await run("bash", ["-c", script], folder);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    const printed = result.stdout.trim().split("\n").slice(-expected.length);
    expect(printed).toEqual(expected);
  });
});
