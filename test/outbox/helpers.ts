/** Shared pieces of the outbox tests: a migrated schema, a recording target, event writers. */
import pg from "pg";
import { expect } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { silentLogger } from "../../src/core/logger.js";
import type { OutboxEvent } from "../../src/outbox/event.js";
import type { PublishOutcome, Target } from "../../src/outbox/target.js";
import { PostgresOutbox } from "../../src/outbox/writer.js";
import { runCli, spawnCli } from "../helpers/cli.js";
import { waitFor } from "../helpers/wait-for.js";

/** Creates `schema` with Conveyor's migrations (the outbox tables among them). */
export async function migrateSchema(url: string, schema: string): Promise<void> {
  const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger, poolSize: 1 });
  try {
    await backend.migrate();
  } finally {
    await backend.close();
  }
}

/**
 * A target that records what reaches it, in arrival order, and can be told how to answer: the
 * relay's own logic under test, apart from any broker (the real targets have their own tests).
 */
export class RecordingTarget implements Target {
  readonly description = "recording";
  readonly received: OutboxEvent[] = [];
  /** Decides each event's outcome; default: published. */
  decide: (event: OutboxEvent) => PublishOutcome = () => ({ status: "published" });
  /** Milliseconds to hold each batch (random up to this), so concurrent relays interleave. */
  maxDelayMs = 0;
  failWhole: Error | null = null;

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    if (this.maxDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, Math.random() * this.maxDelayMs));
    if (this.failWhole) throw this.failWhole;
    const outcomes = events.map((e) => this.decide(e));
    events.forEach((e, i) => {
      if (outcomes[i]!.status === "published") this.received.push(e);
    });
    return outcomes;
  }

  async close(): Promise<void> {}
}

/** Writes `count` events over `keys` keys, `perTx` per transaction, through the public writer. */
export async function writeEvents(
  pool: pg.Pool,
  schema: string,
  count: number,
  options: { keys?: number; perTx?: number; topic?: string } = {},
): Promise<string[]> {
  const outbox = new PostgresOutbox({ schema });
  const keys = options.keys ?? 10;
  const perTx = options.perTx ?? 10;
  const ids: string[] = [];
  for (let i = 0; i < count; i += perTx) {
    // Each transaction writes its keys in one global order (sorted), as docs/outbox.md asks:
    // publish() holds each key's lock to commit, so two transactions taking two keys in
    // opposite orders would deadlock.
    const batch = Array.from({ length: Math.min(count, i + perTx) - i }, (_, o) => i + o).sort((a, b) => (a % keys) - (b % keys) || a - b);
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      for (const j of batch) {
        ids.push(await outbox.publish(client, { topic: options.topic ?? "t", key: `k${j % keys}`, payload: { n: j, key: `k${j % keys}` } }));
      }
      await client.query("COMMIT");
    } catch (error) {
      await client.query("ROLLBACK");
      throw error;
    } finally {
      client.release();
    }
  }
  return ids;
}

/** For each key, the payload numbers in arrival order. */
export function sequencesByKey(events: readonly OutboxEvent[]): Map<string, number[]> {
  const byKey = new Map<string, number[]>();
  for (const e of events) {
    const { n } = JSON.parse(e.payloadText) as { n: number };
    const key = e.key ?? "";
    byKey.set(key, [...(byKey.get(key) ?? []), n]);
  }
  return byKey;
}

/**
 * The relay crash every target is tested under: `conveyor relay ARGS` (batch size 25, 40 events
 * written) SIGKILLed at the `relay-after-publish` failpoint, after the target confirmed the first
 * batch and before the outbox recorded it; then restarted until the outbox drains. Checks that the
 * first batch reached the target while the outbox still held all 40, and that afterwards every
 * event is there, exactly the crashed batch twice (the one redelivery, never a loss).
 * `received()` lists the outbox ids the target holds, in any order.
 */
export async function expectRedeliveryAfterRelayCrash(input: {
  args: string[];
  ids: readonly string[];
  backlog: () => Promise<number>;
  received: () => Promise<string[]>;
  cleanups: Array<() => Promise<unknown>>;
}): Promise<void> {
  const crashed = await runCli(input.args, { CONVEYOR_FAILPOINTS: "relay-after-publish" });
  expect(crashed.code).toBe("SIGKILL");
  expect(crashed.stderr).toMatch(/failpoint relay-after-publish reached/);
  const first = await input.received();
  expect(first).toHaveLength(25); // the first batch reached the target…
  expect(await input.backlog()).toBe(40); // …but the outbox never heard of it

  const relay = spawnCli(input.args);
  input.cleanups.push(async () => {
    if (relay.child.exitCode === null) {
      relay.child.kill("SIGTERM");
      await relay.exited;
    }
  });
  await waitFor(async () => (await input.backlog()) === 0, { timeoutMs: 20_000, description: "the restarted relay drained the outbox" });
  relay.child.kill("SIGTERM");
  expect(await relay.exited).toBe(0);
  const all = await input.received();
  // Every event at least once; exactly the crashed batch twice (the one redelivery).
  expect(new Set(all)).toEqual(new Set(input.ids));
  const counts = new Map<string, number>();
  for (const id of all) counts.set(id, (counts.get(id) ?? 0) + 1);
  expect(
    [...counts]
      .filter(([, n]) => n === 2)
      .map(([id]) => id)
      .sort(),
  ).toEqual([...first].sort());
}
