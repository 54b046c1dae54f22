/**
 * The framework examples, run: Express as its own process (as `npx tsx examples/express/app.ts`
 * starts it), the NestJS application context through its lifecycle, and the Next.js route
 * handlers called with Web Requests as Next.js calls them. Type-checking against the frameworks'
 * own types: Express and the route handlers in `npm run typecheck`, NestJS (legacy decorators,
 * its own tsconfig) here and there.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Worker, silentLogger } from "../../src/index.js";
import { ROOT } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

function start(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, output: () => output, exited };
}

describe("examples/express", () => {
  it("answers 202 with a job id, 422 for a bad body, and shows the typed result the worker stored", { timeout: 90_000 }, async () => {
    const app = start(["--import", "tsx", "examples/express/app.ts"], { PORT: "0", DB: await temp.file("express.db") });
    try {
      const port = await waitFor(() => /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(app.output())?.[1], {
        timeoutMs: 20_000,
        description: "express listening",
      });
      const base = `http://127.0.0.1:${port}`;
      const post = (body: unknown) => fetch(`${base}/signup`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const accepted = await post({ userId: "u_1" });
      expect(accepted.status).toBe(202);
      const { jobId, statusUrl } = (await accepted.json()) as { jobId: string; statusUrl: string };
      expect(accepted.headers.get("location")).toBe(statusUrl);
      const bad = await post({ userId: "" });
      expect(bad.status).toBe(422);
      expect(((await bad.json()) as { issues: Array<{ path: string[] }> }).issues[0]!.path).toEqual(["userId"]);
      const status = await waitFor(
        async () => {
          const body = (await (await fetch(`${base}${statusUrl}`)).json()) as { state: string; sent: boolean | null };
          return body.state === "completed" ? body : null;
        },
        { timeoutMs: 20_000, intervalMs: 50, description: `job ${jobId} completed` },
      );
      expect(status.sent).toBe(true);
    } finally {
      app.child.kill("SIGTERM");
    }
    expect(await app.exited, app.output()).toBe(0);
  });
});

describe("examples/nestjs", () => {
  it("type-checks against @nestjs/common and @nestjs/core", { timeout: 90_000 }, async () => {
    const tsc = start([join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "examples/nestjs/tsconfig.json"], {});
    expect(await tsc.exited, tsc.output()).toBe(0);
  });

  it("the module starts the worker with the application and closes worker, queue and backend with it", { timeout: 90_000 }, async () => {
    // main.ts signs up a user, waits for the email, then app.close(): the process can only end on
    // its own if the module's shutdown hook closed the worker (its timers keep a process alive).
    // TSX_TSCONFIG_PATH is `tsx --tsconfig` for the --import form: Nest's legacy decorators.
    const app = start(["--import", "tsx", "examples/nestjs/main.ts"], { DB: await temp.file("nest.db"), TSX_TSCONFIG_PATH: "examples/nestjs/tsconfig.json" });
    const exited = await Promise.race([app.exited, new Promise((resolve) => setTimeout(resolve, 25_000, "still running"))]);
    if (exited === "still running") app.child.kill("SIGKILL");
    expect(exited, app.output()).toBe(0);
    expect(app.output()).toMatch(/welcome:u_\d+: completed, message msg-1/);
  });
});

describe("examples/nextjs route handlers", () => {
  it("POST answers 202, 422 or 400 from Web Requests; GET reads the typed result", { timeout: 90_000 }, async () => {
    process.env.CONVEYOR_SQLITE_PATH = await temp.file("next.db");
    const { POST } = await import("../../examples/nextjs/app/api/signup/route.js");
    const { GET } = await import("../../examples/nextjs/app/api/jobs/[id]/route.js");
    const { conveyor, sendWelcome } = await import("../../examples/nextjs/lib/conveyor.js");
    const { backend } = conveyor();
    const worker = new Worker({
      backend,
      queues: "email",
      logger: silentLogger,
      pollIntervalMs: 20,
      handlers: [sendWelcome.handle(async (job) => ({ sent: job.data.userId === "u_1" }))],
    });
    try {
      const request = (body: string) => new Request("http://localhost/api/signup", { method: "POST", headers: { "content-type": "application/json" }, body });
      const accepted = await POST(request(JSON.stringify({ userId: "u_1" })));
      expect(accepted.status).toBe(202);
      const { jobId } = (await accepted.json()) as { jobId: string };
      expect((await POST(request(JSON.stringify({ userId: 7 })))).status).toBe(422);
      expect((await POST(request("{not json"))).status).toBe(400);
      const read = async () =>
        (await (await GET(new Request(`http://localhost/api/jobs/${jobId}`), { params: Promise.resolve({ id: jobId }) })).json()) as {
          state: string;
          sent: boolean | null;
        };
      const done = await waitFor(async () => ((await read()).state === "completed" ? read() : null), { description: "the route's job completed" });
      expect(done.sent).toBe(true);
      const missing = await GET(new Request("http://localhost/api/jobs/nope"), { params: Promise.resolve({ id: "nope" }) });
      expect(missing.status).toBe(404);
    } finally {
      await worker.close();
      await backend.close();
      delete process.env.CONVEYOR_SQLITE_PATH;
    }
  });
});
