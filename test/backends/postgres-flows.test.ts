/**
 * PostgreSQL only: flows and dedup windows inside the caller's transaction (`{ tx }`). Both commit
 * or roll back with it, windows included: a rolled-back add leaves no window behind that would
 * drop the next one.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import { Queue } from "../../src/producer/queue.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";

const stores = postgresTestStores({ poolSize: 2 });
const { admin } = stores;
const backend = () => stores.open();

async function inTransaction(work: (client: pg.PoolClient) => Promise<void>, end: "COMMIT" | "ROLLBACK"): Promise<void> {
  const client = await admin.connect();
  try {
    await client.query("BEGIN");
    await work(client);
    await client.query(end);
  } finally {
    client.release();
  }
}

describe("PostgreSQL: flows and dedup windows in the caller's transaction", () => {
  it("a flow added in a transaction that rolls back leaves no job; committed, it is all there", async () => {
    const b = await backend();
    const q = new Queue("q", { backend: b });
    const flow = { name: "parent", options: { jobId: "p" }, children: [{ name: "child", options: { jobId: "c" } }] };
    await inTransaction(async (client) => {
      expect(await q.addFlow(flow, { tx: client })).toMatchObject({ id: "p", duplicate: false });
      expect(await b.get("p")).toBeNull();
    }, "ROLLBACK");
    expect(await b.list()).toEqual([]);
    await inTransaction(async (client) => {
      await q.addFlow(flow, { tx: client });
    }, "COMMIT");
    expect((await b.get("p"))!.state).toBe("waiting-children");
    expect((await b.flow("p"))!.children.map((c) => c.id)).toEqual(["c"]);
  });

  it("a flow refused in the caller's transaction (an id exists) rolls back only its own part", async () => {
    const b = await backend();
    const q = new Queue("q", { backend: b });
    await q.add("child", null, { jobId: "c" });
    await inTransaction(async (client) => {
      await client.query(`CREATE TABLE ${pg.escapeIdentifier(b.schema)}.orders (id text)`);
      await client.query(`INSERT INTO ${pg.escapeIdentifier(b.schema)}.orders VALUES ('o-1')`);
      const added = await q.addFlow({ name: "parent", options: { jobId: "p" }, children: [{ name: "child", options: { jobId: "c" } }] }, { tx: client });
      expect(added).toMatchObject({ id: "p", duplicate: false, children: [{ id: "c", duplicate: true }] });
    }, "COMMIT");
    expect(await b.get("p")).toBeNull();
    const { rows } = await admin.query(`SELECT id FROM ${pg.escapeIdentifier(b.schema)}.orders`);
    expect(rows).toEqual([{ id: "o-1" }]);
  });

  it("a dedup window opened in a transaction that rolls back is gone with it", async () => {
    const b = await backend();
    const q = new Queue("q", { backend: b });
    const dedup = { key: "user-1", ttlMs: 60_000 };
    await inTransaction(async (client) => {
      expect(await q.add("digest", null, { dedup, tx: client })).toMatchObject({ duplicate: false });
    }, "ROLLBACK");
    const next = await q.add("digest", null, { dedup });
    expect(next.duplicate).toBe(false);
    expect(await q.add("digest", null, { dedup })).toEqual({ id: next.id, duplicate: true, dedup: "dropped" });
  });
});
