/**
 * deploy/: the compose file's commands and the systemd unit, run outside Docker and systemd.
 * Each conveyor service of compose.yaml (migrate, serve, worker) is started with its own command,
 * from deploy/ as the image's /app, on PostgreSQL and on Redis; the only change is `--port 0`
 * instead of 8080. The systemd unit passes `systemd-analyze verify` and its ExecStart runs a job.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync, copyFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, inject, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { hashApiKey } from "../../src/http/index.js";
import { Queue } from "../../src/index.js";
import { ROOT } from "../helpers/cli.js";
import { dropSchemas, randomSchema, requireDatabase } from "../helpers/postgres.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const DEPLOY = join(ROOT, "deploy");
const temp = new TempDirs();
const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.splice(0)) await c();
  await temp.removeAll();
});

/** `command:` of each service in compose.yaml (written as JSON-style flow sequences). */
function composeCommands(): Record<string, string[]> {
  const commands: Record<string, string[]> = {};
  let service: string | null = null;
  for (const line of readFileSync(join(DEPLOY, "compose.yaml"), "utf8").split("\n")) {
    const header = /^ {2}([\w-]+):\s*$/.exec(line);
    if (header) service = header[1]!;
    const command = /^ {4}command: (\[.*\])\s*$/.exec(line);
    if (command && service) commands[service] = JSON.parse(command[1]!) as string[];
  }
  return commands;
}

interface Running {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | string>;
}

/** `conveyor ARGS` from the sources, in `cwd` (the image's /app), with `env` added. */
function conveyor(args: string[], cwd: string, env: NodeJS.ProcessEnv): Running {
  // tsx by its path: `cwd` may be outside the repository, where "tsx" would not resolve.
  const child = spawn(
    process.execPath,
    ["--import", pathToFileURL(join(ROOT, "node_modules/tsx/dist/loader.mjs")).href, join(ROOT, "src/cli/bin.ts"), ...args],
    {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, output: () => output, exited };
}

const stores = {
  postgres: () => {
    const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
    const schema = randomSchema("deploy");
    cleanups.push(() => dropSchemas(url, [schema]));
    return `${url}${url.includes("?") ? "&" : "?"}schema=${schema}`;
  },
  redis: () => {
    const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
    const prefix = testPrefix("deploy");
    cleanups.push(() => deletePrefix(url, prefix));
    return `${url}?prefix=${prefix}`;
  },
};

describe("deploy/compose.yaml", () => {
  it.each(Object.keys(stores) as Array<keyof typeof stores>)(
    "migrate, serve and worker run as written on %s and finish a job enqueued over HTTP",
    { timeout: 90_000 },
    async (store) => {
      const commands = composeCommands();
      expect(Object.keys(commands)).toEqual(expect.arrayContaining(["migrate", "serve", "worker"]));
      const key = "deploy-test-key-0123456789abcdef";
      const env = { CONVEYOR_DB: stores[store](), CONVEYOR_API_KEYS: `ci:enqueue,read:${hashApiKey(key)}` };

      const migrate = conveyor(commands.migrate!, DEPLOY, env);
      expect(await migrate.exited, migrate.output()).toBe(0);

      const serveArgs = commands.serve!.map((arg, i, all) => (all[i - 1] === "--port" ? "0" : arg));
      const serve = conveyor(serveArgs, DEPLOY, env);
      const worker = conveyor(commands.worker!, DEPLOY, env);
      try {
        const port = await waitFor(() => /conveyor serve on http:\/\/[^:]+:(\d+)/.exec(serve.output())?.[1], {
          timeoutMs: 20_000,
          description: "serve listening",
        });
        await waitFor(() => worker.output().includes("conveyor worker"), { timeoutMs: 20_000, description: "worker started" });
        const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
        const accepted = await fetch(`http://127.0.0.1:${port}/v1/queues/email/jobs`, {
          method: "POST",
          headers,
          body: JSON.stringify({ name: "send-welcome", data: { userId: "u_1" } }),
        });
        expect(accepted.status).toBe(202);
        const { jobId } = (await accepted.json()) as { jobId: string };
        const done = await waitFor(
          async () => {
            const job = (await (await fetch(`http://127.0.0.1:${port}/v1/jobs/${encodeURIComponent(jobId)}`, { headers })).json()) as {
              state: string;
              result: unknown;
            };
            return job.state === "completed" ? job : null;
          },
          { timeoutMs: 20_000, intervalMs: 100, description: `job ${jobId} completed by the compose worker` },
        );
        expect(done.result).toEqual({ sent: true, userId: "u_1" });
      } finally {
        serve.child.kill("SIGTERM");
        worker.child.kill("SIGTERM");
      }
      expect(await serve.exited, serve.output()).toBe(0);
      expect(await worker.exited, worker.output()).toBe(0);
    },
  );
});

describe("deploy/conveyor-worker@.service", () => {
  const unit = readFileSync(join(DEPLOY, "conveyor-worker@.service"), "utf8");

  it("passes systemd-analyze verify once its app folder exists", { timeout: 90_000 }, async () => {
    const verifier = spawnSync("systemd-analyze", ["--version"]);
    if (verifier.error) throw new Error("systemd-analyze is missing (Debian package systemd): it checks the unit");
    const app = await temp.make();
    mkdirSync(join(app, "node_modules/.bin"), { recursive: true });
    symlinkSync(join(ROOT, "bin/conveyor.js"), join(app, "node_modules/.bin/conveyor"));
    const dir = await temp.make();
    const path = join(dir, "conveyor-worker@email.service");
    writeFileSync(path, unit.replaceAll("/srv/app", app));
    const verified = spawnSync("systemd-analyze", ["verify", path], { encoding: "utf8" });
    expect(verified.stderr + verified.stdout).toBe("");
    expect(verified.status).toBe(0);
  });

  it("its ExecStart, run in its WorkingDirectory with %i = email, finishes a job", { timeout: 90_000 }, async () => {
    const execStart = /^ExecStart=(.+)$/m.exec(unit)![1]!.split(/\s+/);
    expect(execStart[0]).toBe("/srv/app/node_modules/.bin/conveyor");
    const args = execStart.slice(1).map((a) => a.replaceAll("%i", "email"));
    const app = await temp.make();
    copyFileSync(join(DEPLOY, "handlers.js"), join(app, "handlers.js"));
    copyFileSync(join(DEPLOY, "package.json"), join(app, "package.json"));
    const db = join(app, "jobs.db");
    const seed = new SqliteBackend({ path: db });
    const queue = new Queue("email", { backend: seed });
    const { id } = await queue.add("send-welcome", { userId: "u_2" });
    const worker = conveyor(args, app, { CONVEYOR_DB: `sqlite:${db}` });
    try {
      await waitFor(async () => (await queue.getJob(id))?.state === "completed", { timeoutMs: 20_000, description: "the unit's worker ran the job" }).catch(
        (error: Error) => {
          throw new Error(`${error.message}; worker output:\n${worker.output()}`);
        },
      );
      expect((await queue.getJob(id))!.result).toEqual({ sent: true, userId: "u_2" });
    } finally {
      worker.child.kill("SIGTERM");
      await seed.close();
    }
    expect(await worker.exited, worker.output()).toBe(0);
  });
});
