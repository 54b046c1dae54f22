/** Cron schedules over real HTTP: list with next run times, upsert, delete, scopes, 4xx for bad input. */
import { afterEach, describe, expect, it } from "vitest";
import { hashApiKey, type ApiKeyConfig } from "../../src/http/index.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { waitFor } from "../helpers/wait-for.js";
import { send, serverPerTest, type Harness, type Obj } from "./harness.js";

const { startTestServer, temp } = serverPerTest();
const children: Spawned[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) {
    c.child.kill("SIGTERM");
    await c.exited;
  }
});
let h: Harness;

const KEYS = {
  read: "ck_read_0123456789abcdefghijklmnopqrstuv",
  admin: "ck_admin_0123456789abcdefghijklmnopqrstu",
  enqueue: "ck_enq_0123456789abcdefghijklmnopqrstuvw",
};
const API_KEYS: ApiKeyConfig[] = [
  { id: "read", sha256: hashApiKey(KEYS.read), scopes: ["read"] },
  { id: "admin", sha256: hashApiKey(KEYS.admin), scopes: ["admin"] },
  { id: "enqueue", sha256: hashApiKey(KEYS.enqueue), scopes: ["enqueue"] },
];
const as = (key: string) => ({ authorization: `Bearer ${key}` });

interface View {
  queue: string;
  id: string;
  cron: string;
  tz: string;
  name: string;
  data: unknown;
  misfire: { policy: string; graceMs: number; limit: number };
  lastTickAt: string | null;
  nextRunAt: string | null;
  version: number;
}

describe("schedules API", () => {
  it("PUT creates (201) then replaces (200); GET lists them with next run times; DELETE removes (204, then 404)", async () => {
    h = await startTestServer();
    const body = {
      cron: "0 8 * * MON",
      tz: "Europe/Berlin",
      name: "digest",
      data: { to: "team" },
      options: { attempts: 5 },
      misfire: { policy: "all", limit: 10 },
    };
    const created = await h.request<View>("PUT", "/v1/queues/reports/schedules/weekly", { body });
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      queue: "reports",
      id: "weekly",
      cron: "0 8 * * MON",
      tz: "Europe/Berlin",
      name: "digest",
      data: { to: "team" },
      misfire: { policy: "all", limit: 10 },
      lastTickAt: null,
      version: 1,
    });
    // Monday 08:00 in Berlin is 07:00 or 06:00 UTC, depending on the season.
    expect(created.json.nextRunAt).toMatch(/T0[67]:00:00\.000Z$/);
    expect(new Date(created.json.nextRunAt!).getUTCDay()).toBe(1);
    const replaced = await h.request<View>("PUT", "/v1/queues/reports/schedules/weekly", { body: { cron: "*/5 * * * *", name: "digest" } });
    expect(replaced.status).toBe(200);
    expect(replaced.json).toMatchObject({ cron: "*/5 * * * *", tz: "UTC", misfire: { policy: "once" }, version: 2 });
    expect(Date.parse(replaced.json.nextRunAt!) % 300_000).toBe(0);
    await h.request("PUT", "/v1/queues/other/schedules/tick", { body: { cron: "* * * * * *", name: "t" } });

    const all = await h.request<{ schedules: View[] }>("GET", "/v1/schedules");
    expect(all.status).toBe(200);
    expect(all.json.schedules.map((s) => `${s.queue}/${s.id}`)).toEqual(["other/tick", "reports/weekly"]);
    const mine = await h.request<{ schedules: View[] }>("GET", "/v1/queues/reports/schedules");
    expect(mine.json.schedules.map((s) => s.id)).toEqual(["weekly"]);
    expect((await h.request<View>("GET", "/v1/queues/reports/schedules/weekly")).json.cron).toBe("*/5 * * * *");
    expect((await h.request("GET", "/v1/queues/reports/schedules/nope")).status).toBe(404);

    expect((await h.request("DELETE", "/v1/queues/reports/schedules/weekly")).status).toBe(204);
    const gone = await h.request<Obj>("DELETE", "/v1/queues/reports/schedules/weekly");
    expect(gone.status).toBe(404);
    expect(gone.json.detail).toMatch(/no schedule "weekly" in queue "reports"/);
    expect(await h.backend.scheduleList()).toHaveLength(1);
  });

  it("bad input answers 4xx with what to fix, and stores nothing", async () => {
    h = await startTestServer();
    const put = (body: unknown, id = "s") => h.request<Obj>("PUT", `/v1/queues/q/schedules/${id}`, { body });
    const cases: Array<[unknown, number, RegExp]> = [
      [{ cron: "61 * * * *", name: "n" }, 422, /cron pattern "61 \* \* \* \*" is not valid/],
      [{ cron: "* * * * *", tz: "Atlantis/Capital", name: "n" }, 422, /IANA time zone/],
      [{ cron: "0 0 31 2 *", name: "n" }, 422, /never fires/],
      [{ cron: "* * * * *", name: "n", options: { jobId: "x" } }, 422, /cannot set jobId/],
      [{ cron: "* * * * *", name: "n", options: { attempts: 0 } }, 422, /attempts/],
      [{ cron: "* * * * *", name: "n", misfire: "later" }, 400, /misfire/],
      [{ cron: "* * * * *", name: "n", misfire: { policy: "all", limit: 5000 } }, 400, /limit/],
      [{ cron: "* * * * *" }, 400, /name/],
      [{ cron: "* * * * *", name: "n", every: 5 }, 400, /every/],
      [{ cron: "* * * * *", name: "bad name" }, 400, /name/],
    ];
    for (const [body, status, detail] of cases) {
      const r = await put(body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(String(r.json.detail), JSON.stringify(body)).toMatch(detail);
    }
    expect((await put({ cron: "* * * * *", name: "n" }, "bad%20id")).status).toBe(400);
    expect(await h.backend.scheduleList()).toEqual([]);
  });

  it("scopes: read keys list, only admin keys change; an enqueue key sees nothing", async () => {
    h = await startTestServer({ apiKeys: API_KEYS });
    const body = { cron: "* * * * *", name: "n" };
    expect((await h.request("PUT", "/v1/queues/q/schedules/s", { body, headers: as(KEYS.read) })).status).toBe(403);
    expect((await h.request("PUT", "/v1/queues/q/schedules/s", { body, headers: as(KEYS.enqueue) })).status).toBe(403);
    expect((await h.request("PUT", "/v1/queues/q/schedules/s", { body })).status).toBe(401);
    expect((await h.request("PUT", "/v1/queues/q/schedules/s", { body, headers: as(KEYS.admin) })).status).toBe(201);
    expect((await h.request<{ schedules: View[] }>("GET", "/v1/schedules", { headers: as(KEYS.read) })).json.schedules).toHaveLength(1);
    expect((await h.request("GET", "/v1/schedules", { headers: as(KEYS.enqueue) })).status).toBe(403);
    expect((await h.request("DELETE", "/v1/queues/q/schedules/s", { headers: as(KEYS.read) })).status).toBe(403);
    expect((await h.request("DELETE", "/v1/queues/q/schedules/s", { headers: as(KEYS.admin) })).status).toBe(204);
  });

  it("a job id of the reserved tick form cannot be taken by an API caller", async () => {
    h = await startTestServer();
    const r = await h.request<Obj>("POST", "/v1/queues/q/jobs", { body: { name: "n", options: { jobId: "cron_q~s~2030-01-01T00:00:00.000Z" } } });
    expect(r.status).toBe(422);
    expect(String(r.json.detail)).toMatch(/reserved/);
  });
});

describe("conveyor serve fires schedules", () => {
  it("a schedule PUT over HTTP fires from the serve process itself (no worker): its tick jobs appear", async () => {
    const db = await temp.file("serve.db");
    const child = spawnCli(["serve", "--port", "0", "--log-level", "warn", "--no-auth", "--db", `sqlite:${db}`]);
    children.push(child);
    const base = await waitFor(() => /conveyor serve on (http:\/\/\S+?)\/v1 /.exec(child.stderr())?.[1], {
      timeoutMs: 20_000,
      description: `serve to start (stderr: ${child.stderr()})`,
    });
    expect((await send(base, "PUT", "/v1/queues/ticks/schedules/every-second", { body: { cron: "* * * * * *", name: "tick" } })).status).toBe(201);
    const jobs = await waitFor(
      async () => {
        const r = await send<{ jobs: Array<{ id: string }> }>(base, "GET", "/v1/queues/ticks/jobs");
        return r.json.jobs.length >= 2 ? r.json.jobs : null;
      },
      { timeoutMs: 20_000, description: "two tick jobs" },
    );
    for (const j of jobs) expect(j.id).toMatch(/^cron_ticks~every-second~/);
    const view = await send<{ lastTickAt: string | null }>(base, "GET", "/v1/queues/ticks/schedules/every-second");
    expect(view.json.lastTickAt).not.toBeNull();
  });
});
