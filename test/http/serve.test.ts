/** `conveyor serve` as an operator runs it: keys, the in-process worker, webhooks, SIGTERM. */
import { createHmac } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer as createHttpServer, type IncomingHttpHeaders } from "node:http";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { generateWebhookSecret, verifyWebhook } from "../../src/http/index.js";
import { runCli, spawnCli, type Spawned } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { openStream, send } from "./harness.js";

const temp = new TempDirs();
const children: Spawned[] = [];
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill("SIGKILL");
  for (const c of closers.splice(0)) await c();
});
afterAll(() => temp.removeAll());

async function newKey(spec: string): Promise<{ key: string; flag: string }> {
  const r = await runCli(["serve", "--new-key", spec]);
  expect(r.code).toBe(0);
  const key = /key \(give it to the client; it is not stored anywhere\): (\S+)/.exec(r.stdout)![1]!;
  const flag = /--api-key (\S+)/.exec(r.stdout)![1]!;
  return { key, flag };
}

async function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ child: Spawned; base: string }> {
  const child = spawnCli(["serve", "--port", "0", "--log-level", "warn", ...args], env);
  children.push(child);
  const base = await waitFor(() => /conveyor serve on (http:\/\/\S+?)\/v1 /.exec(child.stderr())?.[1], {
    timeoutMs: 20_000,
    description: `the server to start (stderr: ${child.stderr()})`,
  });
  return { child, base };
}

describe("conveyor serve", () => {
  it("refuses to start without API keys unless --no-auth", async () => {
    const db = await temp.file("jobs.db");
    const r = await runCli(["serve", "--db", `sqlite:${db}`]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no API keys: pass --api-key/);
  });

  it("--id-secret-env keys the idem_ ids with that secret, the same after a restart; an empty variable is refused", async () => {
    const db = await temp.file("jobs.db");
    const web = await newKey("web:enqueue,read");
    const secret = "0123456789abcdef0123456789abcdef-serve-id-secret";
    const refused = await runCli(["serve", "--db", `sqlite:${db}`, "--api-key", web.flag, "--id-secret-env", "CONVEYOR_TEST_ID_SECRET"], {
      CONVEYOR_TEST_ID_SECRET: "",
    });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--id-secret-env CONVEYOR_TEST_ID_SECRET: that environment variable is empty/);
    const expected = `idem_${createHmac("sha256", secret).update("web\u0000q\u0000k1").digest("base64url").slice(0, 32)}`;
    const ids: string[] = [];
    for (let run = 0; run < 2; run++) {
      const { child, base } = await serve(["--db", `sqlite:${db}`, "--api-key", web.flag, "--id-secret-env", "CONVEYOR_TEST_ID_SECRET"], {
        CONVEYOR_TEST_ID_SECRET: secret,
      });
      const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", {
        body: { name: "n" },
        headers: { authorization: `Bearer ${web.key}`, "idempotency-key": "k1" },
      });
      expect(r.status).toBe(202);
      expect(r.headers.get("idempotent-replayed")).toBe(run === 0 ? null : "true");
      ids.push(r.json.jobId);
      child.child.kill("SIGTERM");
      await child.exited;
    }
    expect(ids).toEqual([expected, expected]);
  });

  it("serves the API with hashed keys and runs jobs in-process with --handlers; SIGTERM exits 0", async () => {
    const db = await temp.file("jobs.db");
    const web = await newKey("web:enqueue,read");
    const { child, base } = await serve(["--db", `sqlite:${db}`, "--api-key", web.flag, "--handlers", "test/fixtures/http-handlers.ts", "--queue", "q"]);
    const auth = { authorization: `Bearer ${web.key}` };
    expect((await send(base, "GET", "/v1/queues")).status).toBe(401);
    const r = await send<{ jobId: string; pollUrl: string }>(base, "POST", "/v1/queues/q/jobs", {
      body: { name: "echo", data: { value: { hello: "world" } } },
      headers: auth,
    });
    expect(r.status).toBe(202);
    const s = await openStream(`${base}/v1/jobs/${r.json.jobId}/events`, auth);
    await s.ended;
    expect(s.events.at(-1)!.data).toMatchObject({ state: "completed", result: { hello: "world" } });
    const status = await send(base, "GET", r.json.pollUrl, { headers: auth });
    expect(status.json).toMatchObject({ state: "completed", result: { hello: "world" } });
    expect(child.stderr()).not.toContain(web.key);
    child.child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  });

  it("delivers signed callbacks with CONVEYOR_WEBHOOK_SECRETS and an allow-list from --webhooks", async () => {
    const received: Array<{ headers: IncomingHttpHeaders; body: string }> = [];
    const receiver = createHttpServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        received.push({ headers: req.headers, body });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
    closers.push(() => new Promise((r) => receiver.close(() => r())));
    const port = (receiver.address() as { port: number }).port;

    const db = await temp.file("jobs.db");
    const config = await temp.file("webhooks.json");
    writeFileSync(config, JSON.stringify({ allow: ["127.0.0.1"] }));
    const secret = generateWebhookSecret();
    const { child, base } = await serve(
      ["--db", `sqlite:${db}`, "--no-auth", "--handlers", "test/fixtures/http-handlers.ts", "--queue", "q", "--webhooks", config],
      { CONVEYOR_WEBHOOK_SECRETS: secret },
    );
    const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", {
      body: { name: "echo", data: { value: 7 }, options: { callbackUrl: `http://127.0.0.1:${port}/done` } },
    });
    expect(r.status).toBe(202);
    await waitFor(() => received.length > 0, { timeoutMs: 20_000, description: "the callback" });
    const event = verifyWebhook(secret, received[0]!.headers, received[0]!.body) as { type: string; data: { id: string; result: unknown } };
    expect(event).toMatchObject({ type: "job.completed", data: { id: r.json.jobId, result: 7 } });
    expect(child.stderr()).not.toContain(secret);
    child.child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  });
});
